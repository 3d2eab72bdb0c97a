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
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
if [ "$mode" = reject ]; then
  printf 'policies:\n  - name: p\n    outflow: 1/h\n    queue: 1\n' >"$work/p.yaml"; keys=1
else
  printf 'policies:\n  - name: p\n    outflow: 1/s\n    queue: 100000\n' >"$work/p.yaml"; keys=1000
fi
cat >"$work/post.lua" <<LUA
counter = 0
request = function()
  counter = counter + 1
  return wrk.format("POST", "/v1/jobs/p/k" .. (counter % $keys), {["Content-Type"]="application/octet-stream"}, "payload-0123456789abcdef")
end
LUA
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
# run BIN LABEL ROUND: prints "LABEL rps cpu-us-per-request"
run() {
  local hp np pid t0 t1 out n rps
  hp=$(port); np=$(port)
  "$1" serve --policies "$work/p.yaml" --http 127.0.0.1:$hp --data "$work/$2$3" --nats-listen 127.0.0.1:$np >"$work/log-$2" 2>&1 &
  pid=$!
  for _ in $(seq 150); do curl -fs "http://127.0.0.1:$hp/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
  wrk -t2 -c64 -d2s -s "$work/post.lua" "http://127.0.0.1:$hp" >/dev/null   # warm-up
  t0=$(ticks $pid)
  out=$(wrk -t2 -c64 -d6s -s "$work/post.lua" "http://127.0.0.1:$hp")
  t1=$(ticks $pid)
  kill $pid; wait $pid 2>/dev/null || true
  n=$(echo "$out" | awk '/requests in/{print $1}')
  rps=$(echo "$out" | awk '/Requests\/sec/{print int($2)}')
  echo "$2 $rps $(( (t1 - t0) * 1000000 / hz / n ))"
}
for r in $(seq "$rounds"); do
  if (( r % 2 )); then a=$(run "$old" old $r); b=$(run "$new" new $r); else b=$(run "$new" new $r); a=$(run "$old" old $r); fi
  read -r _ ors ocpu <<<"$a"; read -r _ nrs ncpu <<<"$b"
  echo "round $r ($mode, load $(cut -d' ' -f1 /proc/loadavg)): old $ors req/s ${ocpu} CPU-µs/req; new $nrs req/s ${ncpu} CPU-µs/req; new/old throughput $(awk "BEGIN{printf \"%.2f\", $nrs/$ors}")"
done
