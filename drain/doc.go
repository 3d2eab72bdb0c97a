// Package drain is the leak of shaper's leaky buckets: it drains every key of
// a policy's queue at the policy's fixed outflow rate, to a Sink.
//
// # How a Drainer works
//
// A Drainer learns which keys have work from a headers-only watch of the
// queue stream (queue.Queue.Watch). It keeps a small state per active key —
// the head job read ahead of its slot, the key's next slot, the jobs whose
// slots are still held — and a heap of keys ordered by when they next need
// attention. One scheduler goroutine pops due keys and hands each a step to a
// bounded pool of workers (Config.Workers); a key is never in two steps at
// once, which keeps it FIFO. Thousands of active keys cost thousands of small
// structs, not goroutines or JetStream consumers.
//
// A step delivers the held job, frees the slots of jobs delivered before it,
// and reads the key's next job. Because the head is read ahead, a delivery
// starts at its slot without waiting on JetStream. The head is read by the
// exact stream sequence Watch reported for the key (one index lookup), never
// by searching the key's subject, which would scan every job stored after
// the key's last one, of all keys. Watch reports every job from the stream's
// first, also while the Drainer is passive, so the list is complete. A job
// not found is skipped only when the stream leader has stored past it and a
// second read still misses it (in a cluster the watch's server may store a
// job before the leader does): it was removed by the drainer this one took
// over from. With a debug logger every job learnt of and every step is
// logged.
//
// # Several shapers
//
// A Drainer can be passive (Config.Passive, SetActive): it watches and
// counts, so its owner can answer producers, but delivers nothing. The
// shaper package makes exactly one drainer per policy active, by lease.
//
// # Pacing
//
// Slots of a key are one outflow interval apart and advance by the schedule,
// not by when a delivery happens to run, so under backlog the achieved rate
// is the configured one; a drain that falls more than an interval behind
// resumes on the key's own slot grid instead of bursting to catch up (see
// nextSlot). With a policy Total, a due key must also take the policy's next
// slot; keys get those slots in the order they fell due, so the cap is shared
// fairly.
//
// A delivered job keeps its queue slot for the rest of its outflow slot (at
// most Config.MaxSlotHold): a key's queue therefore behaves as a leaky bucket
// of the queue size, and a burst against a draining key finds exactly that
// many places. A crash in that window delivers the job again (at least once).
//
// # Failures
//
// A failed delivery leaves the job at the head of its key and retries it
// after an exponential backoff with full jitter (the policy's retry backoff
// and max_backoff); a *RetryAfterError from the sink pauses the key for the
// time the downstream asked. Other keys go on at their rates.
package drain
