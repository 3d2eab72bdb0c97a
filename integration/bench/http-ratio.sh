#!/usr/bin/env bash
# HTTP admission (202) and 429 speed of shaper serve, measured from outside as a user would: wrk (a C
# load generator) against the shaper with its embedded JetStream, then against a trivial net/http
# handler that reads the body and answers the same status with a body of the same size, in the
# same round. Reports requests/s and CPU per request (user+system of the server process, from
# /proc) for both, and their ratios.
# Usage, from the project root:  integration/bench/http-ratio.sh [admit|reject] [rounds]
# Needs go, wrk and curl (wrk is installed with apt-get when missing and running as root).
set -euo pipefail
mode=${1:-admit}; rounds=${2:-5}
. "$(dirname "$0")/lib.sh"
go build -o "$work/shaper" ./cmd/shaper
mkdir -p "$work/base" && cat >"$work/base/main.go" <<'GO'
package main

import (
	"io"
	"net/http"
	"os"
)

func main() {
	code := 202
	if os.Args[2] == "reject" {
		code = 429
	}
	http.ListenAndServe(os.Args[1], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		w.Write([]byte(`{"id":"dn1ml4ye3996-ya","policy":"p","key":"k","queued":1,"eta_ms":0}`))
	}))
}
GO
(cd "$work/base" && go mod init base >/dev/null 2>&1 && go build -o "$work/trivial" .)
wratios=(); cratios=()
for r in $(seq "$rounds"); do
  read -r s scpu <<<"$(measure_shaper "$work/shaper" data$r)"
  bp=$(port); "$work/trivial" 127.0.0.1:$bp "$mode" & bpid=$!
  for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$bp/" && break; sleep 0.1; done
  read -r b bcpu <<<"$(measure $bpid "http://127.0.0.1:$bp")"
  kill $bpid; wait $bpid 2>/dev/null || true
  w=$(python3 -c "print(f'{$s/$b:.2f}')"); c=$(python3 -c "print(f'{$bcpu/max($scpu,1):.2f}')")
  wratios+=("$w"); cratios+=("$c")
  echo "round $r ($mode, load $(cut -d' ' -f1 /proc/loadavg)): shaper $s req/s ${scpu} CPU-µs/req; trivial handler $b req/s ${bcpu} CPU-µs/req; throughput ratio $w, CPU ratio (trivial/shaper) $c"
done
python3 -c "import statistics,sys;n=len(sys.argv)//2;w=list(map(float,sys.argv[1:n+1]));c=list(map(float,sys.argv[n+1:]));print(f'median throughput ratio {statistics.median(w):.2f} (range {min(w)}–{max(w)}), median CPU ratio {statistics.median(c):.2f} (range {min(c)}–{max(c)})')" "${wratios[@]}" "${cratios[@]}"
