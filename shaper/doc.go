// Package shaper is the service that wires queue, drain, limiter and
// policies into a request shaper: a leaky bucket run as a worker.
//
//	s, err := shaper.New(shaper.Config{Policies: set})
//	if err != nil { … }
//	err = s.Run(ctx) // serves until ctx ends, then shuts down gracefully
//
// # What a Shaper runs
//
// For each policy: a bounded queue (queue.Queue, one JetStream stream, one
// subject per key), a Drainer delivering each key at the policy's outflow
// rate, a deferred stream with a second Drainer that re-admits deferred jobs,
// a dead-letter stream, and an optional admission limiter (memory, or Redis
// with Config.RedisURL). Ingress is HTTP (Handler: POST
// /v1/jobs/{policy}/{key} and the operator API) and NATS requests on
// <Config.SubmitSubject>.<policy>.<key token>, in a queue group. The NATS
// ingress is pipelined: jobs are sent to JetStream without waiting one by
// one, and the answers go back as JetStream acknowledges them (ingress.go).
//
// With no Config.NATSURL a Shaper runs an embedded JetStream server storing
// in Config.DataDir and listening on Config.NATSListen, so one process and
// no other service is a working installation.
//
// # Admission
//
// A submission is checked in this order, each step able to answer at once:
// the policy (404), the key (400), the payload size (413), the admission
// limit (429 with the limiter's Retry-After, or 503 when Redis fails and the
// policy fails closed), the deferred jobs already waiting for the key
// (a defer policy keeps submission order: the new job is deferred behind
// them), and the queue itself: JetStream stores the job, or refuses it
// atomically when the key holds its queue size (429, with the exact time
// until a slot frees, computed by the draining Drainer), or fails (503).
// A key known to be full is answered 429 from memory until its next slot
// frees. For a defer policy the refused job is kept in the deferred stream
// and the 429 says deferred: true, its id and when it is expected to run.
//
// # Several shapers
//
// Shapers sharing a JetStream cluster all admit; each policy is drained by
// the one holding its lease in the SHAPER_LEASES bucket, so per-key queue
// sizes (JetStream's) and rates (one drainer) hold globally. Live policy
// changes (PUT /v1/policies/{name}) go through the SHAPER_POLICIES bucket to
// every shaper. Admission limits are shared through Redis; while Redis is
// lost, a fail-open policy enforces this shaper's share of the limit.
//
// # Records
//
// Job records (GET /v1/jobs/{id}) live in the SHAPER_JOBS bucket for
// Config.JobTTL after their last change; they are written without waiting
// for JetStream, so a record may lag or, rarely, miss a step — the job
// itself never depends on its record. Admission writes none: a job's id
// names its queue and sequence (queue.JobID), and while it is stored there
// it is queued. A record appears when the job is delivered, fails an
// attempt, is deferred or dead-lettered.
//
// A Shaper is safe for concurrent use; Run may be called once.
package shaper
