#!/usr/bin/env bash
# shaper tune over an hour of traffic at 1,000 jobs/s on 10,000 keys, measured from outside with
# /usr/bin/time (wall time, CPU, max RSS), and for memory against trace length, the same over a
# quarter of the hour. Baseline of the same run: the drain alone over as many jobs
# (drain.BenchmarkAdvance at 10,000 keys: a MemQueue and a driven Drainer, no admission, no trace),
# under /usr/bin/time too, for CPU per job.
# Usage, from the project root:  integration/bench/tune.sh [candidates]   (candidates: grid | one; default grid)
set -euo pipefail
mode=${1:-grid}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
go build -o "$work/shaper" ./cmd/shaper
go build -o "$work/producer" ./cmd/producer
printf 'policies:\n  - name: p\n    outflow: 1/s\n    queue: 10\n' >"$work/p.yaml"
"$work/producer" trace --duration 1h --rate 1000/s --keys 10000 --seed 1 --out "$work/hour.csv" 2>/dev/null
"$work/producer" trace --duration 15m --rate 1000/s --keys 10000 --seed 1 --out "$work/quarter.csv" 2>/dev/null
grid=()
[ "$mode" = one ] && grid=(--outflow 1/s --queue 10)
for trace in quarter hour; do
  echo "## shaper tune over $trace.csv ($(($(grep -vc "^#" "$work/$trace.csv") - 1)) submissions), load $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "wall %e s, user %U s, sys %S s, max RSS %M KB" \
    "$work/shaper" tune --policy-file "$work/p.yaml" --trace "$work/$trace.csv" "${grid[@]}" \
    --max-wait 2s --max-reject 1% 2>&1 >"$work/$trace.out" | grep -v '^tune: [0-9]'
  grep -E "submissions over|not replayed|^recommended" "$work/$trace.out"
done
echo "## baseline: the drain alone over 3,600,000 jobs, load $(cut -d' ' -f1-3 /proc/loadavg)"
go test -c -o "$work/drain.test" ./drain
/usr/bin/time -f "wall %e s, user %U s, sys %S s, max RSS %M KB" \
  "$work/drain.test" -test.run '^$' -test.bench 'Advance/keys=10000' -test.benchtime 3600000x 2>&1 | grep -E 'Benchmark|wall'
