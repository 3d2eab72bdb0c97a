// Package shaper is the service that wires queue, drain, limiter and
// policies into a request shaper: a leaky bucket run as a worker.
//
//	s, err := shaper.New(shaper.Config{Policies: set})
//	if err != nil { … }
//	err = s.Run(ctx) // serves until ctx ends, then shuts down gracefully
//
// # What a Shaper runs
//
// For each policy a pipeline: a bounded queue (queue.Queue, one JetStream
// stream, one subject per key), a Drainer delivering each key at the
// policy's outflow rate, a deferred stream with a second Drainer that
// re-admits deferred jobs, a dead-letter stream, and the policy's admission
// gate. Ingress is HTTP (Handler: POST /v1/jobs/{policy}/{key} and the
// operator API) and NATS requests on <Config.SubmitSubject>.<policy>.<key
// token>, in a queue group; the NATS ingress is pipelined.
//
// With no Config.NATSURL a Shaper runs an embedded JetStream server storing
// in Config.DataDir and listening on Config.NATSListen, so one process and
// no other service is a working installation.
//
// A Shaper opens the stores, builds each policy's pipeline, holds the
// drain leases and serves reloads, health and metrics; the rest belongs to
// parts that each own their state and their routes:
//
//   - internal/pipeline: the one constructor of a policy's gate and
//     drainers (the shaper's, the tune replay's and the tests');
//   - internal/admission: the Gate of each policy, the one place that
//     answers "may this job enter this key now, and if not, when" — for
//     HTTP, NATS and re-admission alike, formatting the drain's schedule;
//   - internal/ingress: HTTP and NATS submission;
//   - internal/deadletter: the dead letters and their routes;
//   - internal/cluster: drain leases, membership and live-policy overrides;
//   - internal/jobs: job records and GET /v1/jobs/{id};
//   - the policy table (policies.go, status.go): the pipelines, live tuning
//     and the policy routes.
//
// The project's docs/architecture.md describes the whole and the
// guarantees it keeps.
//
// # Several shapers
//
// Shapers sharing a JetStream cluster all admit; each policy is drained by
// the one holding its lease, so per-key queue sizes (JetStream's) and rates
// (one drainer) hold globally. Live policy changes (PUT
// /v1/policies/{name}) reach every shaper through the cluster's overrides.
// Admission limits are shared through Redis; while Redis is lost, a
// fail-open policy enforces this shaper's share of the limit.
//
// A Shaper is safe for concurrent use; Run may be called once.
package shaper
