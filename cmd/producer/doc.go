// Command producer drives a shaper with load and measures the smoothed
// traffic it delivers. It has three subcommands.
//
// # send
//
// send is a bounded load generator: it submits --jobs jobs (default 100), or
// as many as fit in --duration, for one policy, spread round-robin over keys,
// with at most --concurrency requests in flight and, optionally, at most
// --rate submissions per second. By default it POSTs to the shaper's HTTP API,
// /v1/jobs/{policy}/{key} with the key path-escaped; with --nats-url it sends
// a NATS request to shaper.submit.<policy>.<key> instead, the raw key in the
// Shaper-Key header (the subject token is queue.EncodeKey of the key). It
// counts the answers by outcome (queued = 202, rejected and deferred = 429,
// other 4xx, 5xx, NATS errors, unexpected answers and transport errors) and
// reports throughput and latency percentiles:
//
//	producer send --policy orders --keys 10 --jobs 5000 --concurrency 32
//	producer send --policy orders --key 'tenant a' --key ü --rate 200/s --duration 30s
//	producer send --nats-url nats://127.0.0.1:4222 --policy orders --jobs 1000 --idempotency --json
//
// With --trace FILE it submits the jobs of a trace instead (see trace, and
// shaper record), each at its time from the start (--speed 2 runs the
// trace's clock twice as fast), with its key and payload size, and also
// reports how late the submissions started after their times. --start-at
// starts the trace's clock at a given wall-clock time instead of at once,
// for a consumer or another producer to line up with it:
//
//	producer send --policy orders --trace trace.csv --concurrency 64
//
// # trace
//
// trace writes a made-up trace (CSV: at,key,size,outcome; the format is
// package traffic's): --duration of Poisson (or, with --even, evenly
// spaced) arrivals at --rate over --keys keys, uniform or heavy-tailed
// (--zipf S), with optional bursts (--burst-every, --burst-for,
// --burst-rate) and a diurnal ramp (--diurnal-period, --diurnal-amplitude).
// The same flags and --seed make the same trace:
//
//	producer trace --duration 1h --rate 1000/s --keys 10000 --out hour.csv
//	producer trace --duration 60s --rate 50/s --keys 20 --burst-every 10s --burst-for 2s --burst-rate 400/s
//
// # sink
//
// sink subscribes to the delivery subjects (default shaper.out.>), answers
// every delivery that has a reply subject with an empty message, and reports
// per key (from the Shaper-Key header, or the subject's token when the
// header could not carry the key): deliveries, distinct job ids
// (Shaper-Job-Id), duplicates, the achieved rate over the key's busy
// stretches (a gap over twice its median, and over 1 s, is idle time),
// the min, p50 and p99 gap between deliveries, the most deliveries in any
// closed 1-second window, and the p50 and p99 time in queue (receive time
// minus Shaper-Enqueued-At). It stops after --duration, after --expect
// distinct jobs, or on Ctrl-C, and prints a table of the 20 busiest keys plus
// totals, or with --json every key:
//
//	producer sink --expect 5000
//	producer sink --subject 'shaper.out.orders.>' --duration 1m --json
//	producer sink --print
//
// A policy with outflow 20/s should show a rate close to 20 and "max in 1s"
// at most 21 for every key under backlog.
//
// Both commands print a live line on stderr once a second when stderr is a
// terminal, or always with --progress; results go to stdout. Every flag can
// also be set as a PRODUCER_* environment variable: --nats-url as
// PRODUCER_NATS_URL, --key-prefix as PRODUCER_KEY_PREFIX, and so on.
package main
