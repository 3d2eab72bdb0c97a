#!/bin/sh
# make.sh SHAPER [OUT]: writes the upgrade fixture (OUT, default
# store.tar.gz beside this script) with SHAPER, a shaper binary of the
# previous release; see README.txt. Needs curl, jq and tar; listens on
# 127.0.0.1:$HTTP_PORT (default 18480) and :$NATS_PORT (default 18422);
# $RELEASE (the commit SHAPER was built from) goes in the manifest.
set -eu
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
out=${2:-$here/store.tar.gz}
http=127.0.0.1:${HTTP_PORT:-18480}
nats=127.0.0.1:${NATS_PORT:-18422}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/policies.yaml" <<'YAML'
# The policies of the upgrade fixture (see README.txt). Deadlines are long
# so that the fixture's jobs do not age out of the test: a deferred job is
# re-admitted only within retry.deadline of its submission.
policies:
  # Confirmed delivery, slow: nothing is delivered while no consumer
  # answers. A live override raised the outflow to 2/s.
  - name: orders
    outflow: 1/m
    queue: 20
    overflow: reject
    retry: {deadline: 87600h}

  # A full key defers: the jobs past its queue wait in SHAPER_DEFER_emails.
  - name: emails
    outflow: 5/s
    queue: 4
    overflow: defer
    retry: {attempts: 5, backoff: 1s, max_backoff: 5s, deadline: 87600h}

  # A webhook nothing listens on, one attempt: its job is a dead letter.
  - name: hooks
    outflow: 10/s
    queue: 5
    deliver:
      webhook: http://127.0.0.1:1/hook
      timeout: 1s
    retry: {attempts: 1, deadline: 87600h}
YAML

# --job-ttl: the records (deferred jobs, the dead letter's) and the
# horizon marks are kept for ten years, so that the fixture does not age.
"$bin" serve --policies "$work/policies.yaml" --data "$work/data" \
	--http "$http" --nats-listen "$nats" --job-ttl 87600h \
	--instance-id previous-release 2>"$work/shaper.log" &
pid=$!
i=0
until curl -sf "http://$http/readyz" >/dev/null; do
	i=$((i + 1))
	[ $i -lt 300 ] || { cat "$work/shaper.log"; exit 1; }
	sleep 0.1
done

# submit POLICY KEY ESCAPED-KEY N: N jobs, each answer a line of jobs.tsv:
# status, policy, key, id, deferred, payload.
submit() {
	n=1
	while [ $n -le "$4" ]; do
		payload="$1 $2 #$n"
		code=$(curl -s -o "$work/answer" -w '%{http_code}' -X POST \
			"http://$http/v1/jobs/$1/$3" --data-binary "$payload")
		jq -r --arg c "$code" --arg p "$1" --arg k "$2" --arg b "$payload" \
			'[$c, $p, $k, (.id // ""), (.deferred // false | tostring), $b] | @tsv' \
			"$work/answer" >>"$work/jobs.tsv"
		n=$((n + 1))
	done
}

submit orders acme acme 21 # the 21st is refused: the key holds 20
submit orders "acme/eu 1" acme%2Feu%201 12
submit orders globex globex 7
submit orders initech initech 3
submit emails news news 7 # 4 queued, 3 deferred
submit emails "eu/ops 2" eu%2Fops%202 2
submit hooks h1 h1 1

# The override, from loopback (no admin token set).
curl -sf -X PUT "http://$http/v1/policies/orders" \
	-H 'Content-Type: application/merge-patch+json' -d '{"outflow":"2/s"}' >/dev/null

# The hooks job fails its one attempt and is dead-lettered.
i=0
until [ "$(curl -sf "http://$http/v1/dead?policy=hooks" | jq '[.. | objects | select(has("id"))] | length')" -ge 1 ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "no dead letter" >&2; cat "$work/shaper.log"; exit 1; }
	sleep 0.1
done
curl -sf "http://$http/v1/dead?policy=hooks" >"$work/dead.json"
curl -sf "http://$http/v1/policies" >"$work/policies.json"

kill -TERM $pid
wait $pid || { cat "$work/shaper.log"; exit 1; }

# manifest.json: every job answered 202 (queued; the hooks one dead) or
# 429 deferred, in submission order, and what the store should hold.
jq -R -s --arg release "${RELEASE:-unknown}" '
	split("\n") | map(select(. != "") | split("\t")) |
	{
		release: $release,
		jobs: [.[] | select(.[0] == "202" or .[4] == "true") | {
			policy: .[1], key: .[2], id: .[3], payload: .[5],
			state: (if .[4] == "true" then "deferred" elif .[1] == "hooks" then "dead" else "queued" end)
		}],
		refused: [.[] | select(.[0] != "202" and .[4] != "true") | {policy: .[1], key: .[2], status: .[0]}],
		overrides: {orders: {outflow: "2/s"}}
	}' "$work/jobs.tsv" >"$work/manifest.json"

tar -C "$work" -czf "$out" data manifest.json policies.yaml
echo "wrote $out ($(wc -c <"$out") bytes)"
jq -c '{jobs: (.jobs | group_by(.state) | map({(.[0].state): length}) | add), refused: (.refused | length)}' "$work/manifest.json"
jq -c '[.policies[]? // .[]? | {name, queued, deferred, dead, override}]' "$work/policies.json" 2>/dev/null || true
