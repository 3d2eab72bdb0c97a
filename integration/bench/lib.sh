# Shared by the HTTP bench scripts (source it after setting mode=admit|reject): installs wrk when
# missing, makes a work directory ($work, removed on exit, background jobs killed), the policy file
# ($work/p.yaml) and the wrk script ($work/post.lua) of the mode, and defines port (a free
# 127.0.0.1 port), ticks PID (the process's user+system CPU in clock ticks of $hz a second),
# measure PID URL (wrk against URL: requests/s and the CPU per request of PID) and measure_shaper
# BIN NAME (the same of a `BIN serve` of its own).
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
if [ "$mode" = reject ]; then
  # One full key: every request after the first is answered 429.
  printf 'policies:\n  - name: p\n    outflow: 1/h\n    queue: 1\n    overflow: reject\n' >"$work/p.yaml"; keys=1
else
  printf 'policies:\n  - name: p\n    outflow: 1/s\n    queue: 100000\n    overflow: reject\n' >"$work/p.yaml"; keys=1000
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
# measure PID URL: prints "req/s CPU-µs-per-request" of 6 s of wrk after 2 s of warm-up
measure() {
  local t0 t1 out n
  wrk -t2 -c64 -d2s -s "$work/post.lua" "$2" >/dev/null
  t0=$(ticks "$1"); out=$(wrk -t2 -c64 -d6s -s "$work/post.lua" "$2"); t1=$(ticks "$1")
  n=$(echo "$out" | awk '/requests in/{print $1}')
  echo "$(echo "$out" | awk '/Requests\/sec/{print int($2)}') $(( (t1 - t0) * 1000000 / hz / n ))"
}
# measure_shaper BIN NAME: starts BIN serve on free ports with its data in $work/NAME, waits until
# it is ready, prints what measure prints of it, and stops it
measure_shaper() {
  local hp np pid
  hp=$(port); np=$(port)
  "$1" serve --policies "$work/p.yaml" --http 127.0.0.1:$hp --data "$work/$2" --nats-listen 127.0.0.1:$np >"$work/log-$2" 2>&1 &
  pid=$!
  for _ in $(seq 150); do curl -fs "http://127.0.0.1:$hp/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
  measure $pid "http://127.0.0.1:$hp"
  kill $pid; wait $pid 2>/dev/null || true
}
