// Package policies is the shaper's policy model: it reads the YAML policy
// file, checks it, fills in defaults, and hands the result out as an
// immutable Set; and it reads live changes of a policy (Patch), which mean
// what the file means.
//
// # The policy file
//
// A policy file holds one YAML document with a single field, policies, a
// non-empty list of policies:
//
//	policies:
//	  - name: orders        # required; jobs go to /v1/jobs/orders/{key}
//	    outflow: 20/s       # required; each key drains at this fixed rate
//	    queue: 100          # required; each key holds at most this many jobs
//	    overflow: defer     # reject | defer; default reject
//	    total: 500/s        # optional; outflow cap over all keys of the policy
//	    deliver:            # optional; where drained jobs go
//	      subject: shaper.out.orders
//	      mode: confirm
//	      timeout: 5s
//	    retry: {attempts: 5, backoff: 1s, max_backoff: 1m, deadline: 1h, budget: 20%}
//	    admit:              # optional; an admission limit per key
//	      algorithm: token_bucket
//	      limit: 600/m
//	      burst: 10
//	      shadow: false
//	      fail: open
//	    adapt:              # optional; an adaptive outflow under outflow (or total)
//	      per: key
//	      floor: 2/s
//	    concurrency: {key: 2, total: 50}   # optional; deliveries awaiting their receipt
//
// The fields of a policy:
//
//   - name: letters, digits, _ and -, 1 to MaxNameLen bytes. Names are
//     unique, and may not differ only in case (they become part of stream
//     names, which may end up as file names on a case-insensitive disk).
//   - outflow: the rate at which each key's queue drains, in the rate
//     syntax below.
//   - queue: how many jobs each key holds at most, queued plus in delivery:
//     a whole number from 1 to 1000000.
//   - overflow: what a full queue does with a new job. "reject" answers 429
//     and drops it; "defer" answers 429 too, but keeps the job and
//     re-admits it later under the retry rules.
//   - total: a cap on the outflow summed over all keys of the policy; off
//     (or "") is none, as is leaving it out.
//   - deliver: either a NATS subject prefix, as in "deliver: out.orders", or
//     a mapping. A job of key k is published to <subject>.<k>; subject must be
//     a literal NATS subject (no * or >, no spaces, no empty tokens). stream
//     names a JetStream stream that captures <subject>.>, and makes delivery
//     wait for the stream's acknowledgement; it may not contain . * > / \ or
//     spaces. mode (without a stream) is "confirm", the default: each
//     delivery is a request that a consumer answers once it took the job
//     (at least once; no consumer online makes the job wait, which is not an
//     attempt); or "publish": publish and forget (at most once). The older
//     confirm: true|false means mode confirm|publish. webhook is an http://
//     or https:// URL that receives each job as a POST; it excludes subject,
//     stream and mode. timeout bounds one delivery.
//   - retry: attempts (at least 1), backoff (the first delay, doubled on
//     each retry with full jitter), max_backoff (the delay cap, at least
//     backoff) and deadline (how long after its first submission a job may
//     still be retried). Durations use Go's syntax: 500ms, 90s, 5m, 24h;
//     all must be positive. budget is the retry budget of deliveries: a
//     failed job steps aside and the key's fresh jobs go on, while retries
//     take at most this share of the key's slots (any slot no fresh job
//     wants, too), so a flapping downstream cannot starve fresh work. It
//     is a percentage ("20%") or a decimal (0.2), above 0 and at most 100 %,
//     or off: a failed job then blocks its key, strictly in order, until it
//     is delivered or dead-lettered. Jobs of a key are delivered in order
//     but for this: a failed job may be retried after later jobs. See
//     Budget.
//   - admit: an admission limit checked per key before the queue. algorithm
//     is one of gcra, token_bucket, fixed_window, sliding_log and
//     sliding_window; limit is a rate, whose N must be a whole number for the
//     three windowed algorithms; burst (0 or more; 0 means N) is the bucket size — how many jobs an idle key may submit at once — of
//     gcra and token_bucket and is refused for the others; shadow: true only
//     counts what would be rejected; fail says what happens when the limiter
//     backend (Redis) fails: "open" admits within this shaper's local share
//     of the limit, "closed" rejects (503). admit: off is no admission
//     limit, as is leaving it out.
//   - adapt: an adaptive outflow: the drain paces at a rate it adapts,
//     between a floor and a ceiling it never exceeds, from the deliveries'
//     latency, timeouts, failures and 429/503 answers. per is "key" (each
//     key's rate adapts under outflow, from its own deliveries: a
//     downstream per key) or "policy" (the total adapts, from every key's
//     deliveries: one shared downstream; it needs total). floor is the
//     lowest rate, at most the ceiling; left out, a tenth of it. latency is
//     a target delivery latency; left out, the latency may reach tolerance
//     (above 1, at most 10) times the lowest latency seen. adapt: on (or
//     {}) is on with the defaults; adapt: off, or leaving it out, is the
//     fixed outflow. See docs/adaptive.md.
//   - concurrency: how many deliveries may await their receipt (a
//     consumer's reply, a stream's or a webhook's acknowledgement) at once.
//     key (1 to MaxConcurrency, default 1) bounds them per key: with 1 a
//     key's next delivery starts only once the previous one was answered;
//     with more, a key whose receipts come slower than its slots still
//     reaches its outflow, never above it. total (1 to MaxConcurrency, at
//     least key) bounds them over all keys of the policy, split in equal
//     shares, rounded up, between its partitions; left out, only the
//     shaper's workers per policy (--workers, 32) bound them.
//
// Any other field is an error. A field given as null (or with no value) is
// treated as left out.
//
// # Rates
//
// A rate is written N/period. N is a positive decimal number ("20", "0.5",
// "1e3"); period is s, m, h or d (a second, minute, hour or day), or a Go
// duration such as 10s or 1m30s. So "20/s" is twenty a second, "5/10s" one
// every two seconds and "600/m" ten a second. The interval between two
// events must lie between 1µs and 8760h (1000000/s to once a year). See
// ParseRate and Rate.
//
// # Defaults
//
// Parse fills in the fields a policy leaves out:
//
//	overflow           DefaultOverflow (reject)
//	deliver.subject    DefaultDeliverPrefix + "." + name (shaper.out.<name>), unless deliver.webhook is set
//	deliver.timeout    DefaultWebhookTimeout (10s)
//	retry.attempts     DefaultRetryAttempts (10)
//	retry.backoff      DefaultRetryBackoff (1s)
//	retry.max_backoff  DefaultRetryMaxBackoff (1m)
//	retry.deadline     DefaultRetryDeadline (24h)
//	retry.budget       DefaultRetryBudget (20%)
//	admit.fail         DefaultAdmitFail (open), when there is an admit block
//	adapt.per          DefaultAdaptPer (key), when there is an adapt block
//	adapt.floor        DefaultAdaptFloorShare (a tenth) of the ceiling
//	adapt.latency      none: the learned baseline times tolerance
//	adapt.tolerance    DefaultAdaptTolerance (1.5)
//	concurrency.key    DefaultConcurrencyKey (1)
//
// A value given explicitly is never replaced: "attempts: 0" is an error, not
// a request for the default. Patch.Resolve is the one place defaults are
// applied: Parse resolves the Patch of each policy of the file, Set.With a
// Policy's fields but those that have a default and are zero, and a
// running shaper the file's Patch merged with a live override.
//
// # Live changes
//
// A change of a running policy is a Patch: a JSON merge patch (RFC 7396)
// of the policy, read by ParsePatch with the values and messages of the
// file. A field left out keeps its value; null resets it to the file's
// value, or to the default when the file leaves it out; a block names only
// the fields it changes ({"retry": {"attempts": 3}} leaves backoff,
// deadline and budget as they are); admit "off", adapt "off" and total
// "off" switch those off whatever the file says. A live override is the Merge of the
// changes since the last reset, and the live policy is the file's Patch
// merged with it, resolved: so a field the override leaves out follows
// the file.
//
// # Errors
//
// Parse reports every problem it finds, each as an *Error that names the
// file, the line, the policy and the field, joined with errors.Join and
// sorted by line:
//
//	policies.yaml:7: policy "orders": outflow: rate "fast": want N/s, N/m, N/h, N/d or N/<duration>
//	policies.yaml:9:23: policy "orders": retry.attempts: 0: want at least 1
//
// A column follows the line only inside flow collections ({...}, [...]),
// where one line holds several fields. Unknown fields, and words such as
// overflow's or adapt.per's, are named with the nearest known one when
// there is one ("did you mean", by the rule docs/policies.md gives, the
// shaper's one for every name). A YAML syntax error
// is reported alone, on the line where the document stops making sense.
// Policy.Validate and Set.With report the same problems without a position.
//
// # Concurrency
//
// Parse, Load and ParseRate are safe to call concurrently. A Set never
// changes after it is made and is safe for concurrent use; Policies and
// Lookup return copies.
package policies
