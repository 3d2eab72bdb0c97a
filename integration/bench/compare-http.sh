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
for r in $(seq "$rounds"); do
  if (( r % 2 )); then a=$(measure_shaper "$old" old$r); b=$(measure_shaper "$new" new$r); else b=$(measure_shaper "$new" new$r); a=$(measure_shaper "$old" old$r); fi
  read -r ors ocpu <<<"$a"; read -r nrs ncpu <<<"$b"
  echo "round $r ($mode, load $(cut -d' ' -f1 /proc/loadavg)): old $ors req/s ${ocpu} CPU-µs/req; new $nrs req/s ${ncpu} CPU-µs/req; new/old throughput $(awk "BEGIN{printf \"%.2f\", $nrs/$ors}")"
done
