// Package replay replays a trace of a policy's submissions (package
// traffic) through the shaper's own admission and drain, on a virtual
// clock, and recommends an outflow and a queue size from what it finds.
//
// # The same code as the shaper
//
// A replay is no model of the shaper: it is the shaper's own pipeline,
// assembled by the one constructor the shaper uses (shaper/internal/
// pipeline.New: the admission gate with its clock injected, the drainer
// of the queue, the drainer re-admitting deferred jobs through
// Gate.Readmitter, both paced from the policy), over the in-memory queues
// of package drain (drain.MemQueue, with the same atomic per-key limit as
// JetStream's) instead of JetStream's, and driven on the replay's clock
// (pipeline.Pipeline.Advance) instead of started. The gate is swept every
// 10 s of trace time, as the shaper sweeps it. Only the sink differs: it
// measures every delivery, and takes it unless Config.Downstream says the
// downstream fails it — every delivery in a window of trace time
// (Downstream.Down, shaper tune --down) is a failed attempt, retried and
// dead-lettered under the policy's retry settings as a consumer's error
// would be. By default a replay says what the shaper would do with a
// downstream that takes everything it is given.
//
// # Streaming
//
// Run reads its trace once, as a stream, submitting each row at its time
// and running every drain step due before it; after the last row it drains
// what is left. Its memory grows with the keys and their queues, not with
// the trace's length: wait quantiles come from a fixed-size histogram
// (within 0.8 %), the peaks from windows of the last second, and the
// Series for plots keeps at most 1,024 points. RunAll replays a list of
// candidates in parallel, each reading the trace on its own.
//
// # Choosing
//
// Grid makes the candidates (every combination of outflows, queues and
// total caps applied to a policy, validated as the policy file would be).
// Choose picks the cheapest candidate that meets Targets — a p99 time in
// queue, a share rejected, a downstream rate — where cheaper means a
// lower outflow (the downstream's comfort), then a smaller queue, then a
// lower total cap, and says which target binds: the one the cheaper
// candidates miss, or, when none meets every target, the one that cannot
// be met or that stops the candidates meeting the others.
package replay
