#!/usr/bin/env bash
# Same-run comparison of two shaper binaries (say, the last release and a change) from outside the
# process, as a user would: wrk against `shaper serve` with its embedded JetStream, the two binaries
# interleaved round by round so that a noisy machine hurts both alike. Reports requests/s and CPU
# per request (user+system time of the shaper process, from /proc) for each, and their ratio.
# Usage, from the project root:
#   integration/bench/compare-http.sh OLD_BINARY NEW_BINARY [admit|reject] [rounds]
# Needs wrk and curl (wrk is installed with apt-get when missing and running as root).
set -euo pipefail
old=$1; new=$2; mode=${3:-admit}; rounds=${4:-5}
. "$(dirname "$0")/lib.sh"
# run BIN LABEL ROUND: prints "LABEL rps cpu-us-per-request"
run() {
  local hp np pid rps cpu
  hp=$(port); np=$(port)
  "$1" serve --policies "$work/p.yaml" --http 127.0.0.1:$hp --data "$work/$2$3" --nats-listen 127.0.0.1:$np >"$work/log-$2" 2>&1 &
  pid=$!
  for _ in $(seq 150); do curl -fs "http://127.0.0.1:$hp/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
  read -r rps cpu <<<"$(measure $pid "http://127.0.0.1:$hp")"
  kill $pid; wait $pid 2>/dev/null || true
  echo "$2 $rps $cpu"
}
for r in $(seq "$rounds"); do
  if (( r % 2 )); then a=$(run "$old" old $r); b=$(run "$new" new $r); else b=$(run "$new" new $r); a=$(run "$old" old $r); fi
  read -r _ ors ocpu <<<"$a"; read -r _ nrs ncpu <<<"$b"
  echo "round $r ($mode, load $(cut -d' ' -f1 /proc/loadavg)): old $ors req/s ${ocpu} CPU-µs/req; new $nrs req/s ${ncpu} CPU-µs/req; new/old throughput $(awk "BEGIN{printf \"%.2f\", $nrs/$ors}")"
done
