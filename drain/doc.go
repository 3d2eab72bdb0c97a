// Package drain is the leak of shaper's leaky buckets: it drains every key of
// a policy's queue at a fixed outflow rate, to a Sink.
//
// # The queue
//
// A Drainer reads its jobs through Queue, a small interface: a watch of every
// job stored (Watch), the head read by its sequence (Get, LastSeq), freeing a
// job's slot (Remove) and, while passive, the jobs stored per key
// (TokenDepths). *queue.Queue keeps the jobs in NATS JetStream; MemQueue
// keeps them in memory, with the same admission rule (Admit refuses a job for
// a key at its limit, atomically, with queue.ErrFull), for replays and tests.
// The Drainer knows nothing of subjects or streams: where a job goes is the
// Sink's business (NATSSink publishes to <subject>.<key token>).
//
// # How a Drainer works
//
// A Drainer learns which keys have work from the watch. It keeps a small
// state per active key — the head job read ahead of its slot, the failed
// jobs stepped aside, the key's next slot, the jobs whose slots are still
// held — and a heap of keys ordered by when they next need attention.
// Scheduling is one loop: due pops the keys whose time has come (started,
// no more at once than the workers can take) and turns each into a step;
// the step runs (its I/O, without the Drainer's lock);
// complete applies its results to the key and puts the key back in the heap
// at its next event. A key is never in two steps at once, which keeps its
// deliveries and events in order. Thousands of active keys cost thousands
// of small structs, not goroutines or JetStream consumers.
//
// A step frees the slots of jobs delivered before, delivers one job of the
// key (only once those slots are free: a job is never handed over while the
// key's previous delivered one is still stored) or dead-letters one, and
// reads the key's next job; with Pace.Concurrency.Key above 1 the delivery
// leaves the step (see Concurrency). Because
// the head is read ahead, a delivery starts at its slot without waiting on
// the queue. The read of the next head needs nothing of the removal or the
// delivery, so a started Drainer runs it alongside them, on a goroutine of
// its own, and drops it when the job delivered stays the head (its
// delivery failed). After a head whose last attempt failed, the read
// waits for the attempt's end, as it is likely to be dropped. A key whose
// slots are more than twice headLead (250 ms) apart reads its next job
// headLead before its slot instead, in a step of its own — or in the step
// that frees its delivered job's slot, when that comes within headLead of
// the slot (a key at 1/s: 10 ms before it; one step less per delivery) —
// so that a key waiting for a far slot keeps no job in memory; a step's own state comes
// from a pool and goes back to it when the key is released. The head is
// read by the exact sequence Watch reported for the
// key (one index lookup), never by searching the key's subject, which would
// scan every job stored after the key's last one, of all keys. When Watch
// reports jobs whole (queue.Notice.Job: *queue.Queue's default), an active
// Drainer keeps those it reads soon (of its keys that read their heads as
// soon as the one before is delivered, or a key's next job when its slot
// is near), up to Config.WatchedBytes, and takes a head from there without a read; it
// forgets them when it stops delivering or finds itself past its lease,
// since another drainer may remove them from then on. Watch
// reports every job from the queue's first, also while the Drainer is
// passive, so the list is complete. A job not found is skipped only when
// the queue has stored past it (LastSeq) and a second read still misses it
// (in a JetStream cluster the watch's server may store a job before the
// leader does): it was removed by the drainer this one took over from.
// With a debug logger every job learnt of and every step is logged.
//
// # Started or driven
//
// Start runs the loop on goroutines: one scheduler that sleeps until the
// next key falls due (or a job is stored) and a bounded pool of workers
// (Config.Workers) that run the steps. Advance runs the same loop on the
// caller's goroutine: every step due at the time given, then it says when
// the Drainer next needs attention. A replay drives a Drainer over a
// MemQueue that way on a virtual clock, through hours of traffic in seconds:
// MemQueue reports each job from Admit itself, so the Drainer knows of it
// before Admit returns, and a replay is deterministic.
//
// # Time
//
// The scheduler reads the time and gets its timers only through
// Config.Clock (the time package's by default), and draws backoff jitter
// only from Config.Jitter (math/rand/v2 by default). Under testing/synctest
// the default clock is already virtual; a driven Drainer reads a virtual
// clock the replay moves.
//
// # Several shapers
//
// A Drainer can be passive (Config.Passive, SetActive): it watches and
// counts, so its owner can answer producers, but delivers nothing. It reads
// the queue's depths every two seconds, since Watch does not report the
// jobs the active drainer removes. The shaper package makes exactly one
// drainer per policy active, by lease.
//
// # Pacing
//
// Slots of a key are one Pace.Interval apart and advance by the schedule,
// not by when a delivery happens to run, so under backlog the achieved rate
// is the configured one; a drain that falls more than an interval behind
// resumes on the key's own slot grid instead of bursting to catch up (see
// nextSlot). In any window of length T a key starts at most ⌈T/Interval⌉+1
// deliveries. With Pace.Total, a due key must also take the policy's next
// slot; keys get those slots in the order they fell due, so the cap is
// shared fairly.
//
// With Pace.Adapt, Interval (AdaptKey) or Total (AdaptPolicy) is a
// ceiling: a controller of package adapt, one per key or one for the
// Drainer, is fed every attempt's outcome (its latency — Delivery.Took
// when the sink says, else the clock's — a timeout, a failure, a pause the
// downstream asked for) and sets the effective interval, never shorter
// than the ceiling's. The slots, the schedule's answers (StartIn, RoomIn,
// Stored) and the status all read that one effective interval, so what
// producers are told is what the drain does; a new ceiling (SetPace)
// clamps it at once. A key's controller outlives the key's idle moments
// (at least ten minutes). AdaptStatus and Group.Adapting show the rates
// and why. The slot hold (below) stays the ceiling's interval.
//
// A delivered job keeps its queue slot for the rest of its outflow slot (at
// most Config.MaxSlotHold): a key's queue therefore behaves as a leaky bucket
// of the queue size, and a burst against a draining key finds exactly that
// many places. When the hold would end at the key's next slot, it ends
// freeLead (10 ms) before it, in a step of its own, so that the delivery
// in that slot does not wait for the removal (slotHold); also when the
// delivery started late, the hold ending on the key's slot grid (holdEnd),
// so that a key late in one burst of many keys' slots keeps its steps,
// and its place, in the next. A crash in that window delivers the job again (at least
// once): at most that one job per key, since the next is handed over only
// after its slot is freed (with Concurrency.Key above 1, at most Key jobs).
//
// # Concurrency
//
// Pace.Concurrency bounds the deliveries awaiting their receipt (the
// sink's Deliver returning) at once. The zero value is the step model
// above: a key's step delivers and waits for the receipt, and a key is
// never in two steps at once, so a key has at most one delivery awaiting
// its receipt (Key 1); over the keys, Config.Workers (DefaultWorkers)
// bounds the steps in flight, so the deliveries too. Total, when set,
// bounds the deliveries awaiting their receipt over all keys of the
// Drainer as well: a key whose attempt falls due while the Drainer is at
// Total is parked, and the parked keys try again, in the order they fell
// due, at the next receipt. A Group gives each partition ⌈Total/n⌉, at
// least 1.
//
// With Key above 1 a key's delivery leaves its step: the step that
// attempts a job frees the slots of the key's delivered jobs, reads the
// key's next head and takes the job off the key into a flight, counting
// the attempt on the key's slot grid, its retry budget and the total cap
// as a delivery in a step does; once the key is released, the worker
// that ran the step hands the job over and waits for its receipt, while
// the key's next steps go on. The receipt is an event of the key: a
// delivered job keeps its queue slot as a job delivered in a step does;
// a failed one is reported (OnDeliver), then goes back to the key. The
// key may start another delivery while fewer than Key await their
// receipt; at its limit it waits for a receipt, not for a slot, and its
// job starts when one comes, its slots staying on its grid: the per-key
// bound of ⌈T/Interval⌉+1 starts in any window T holds. Jobs of a key
// start in order, each in its own slot; they may be answered in any
// order. A failed job goes back with a retry budget aside, as a failed
// head steps aside; without one to the head, the fresh head going back to
// be read again: no fresh job of the key starts until the failed one is
// delivered or dead-lettered, but those in flight already go on, so
// strict order cannot hold with Key above 1. A job not handed over (past
// the lease's bound) goes back likewise, without an attempt. A job that
// comes back to a key holding an older job not yet attempted (the key
// read its jobs again on an activation while the job was in flight) is
// read again in its order, as the activation's other jobs are. The step
// frees the slots of the key's delivered jobs before each hand-over, so
// at most Key delivered jobs of a key are stored at any moment: a crash
// delivers at most Key jobs of a key again. Drain, Release and Stats
// count flights in flight like steps. Driven (Advance), the worker is the
// caller: a flight is handed over and its receipt applied before Advance
// goes on, so a replay delivers as with Key 1.
//
// Deliveries whose receipts come slower than the key's slots make the
// key's real rate Key per receipt time, below its outflow. The schedule
// counts it: each key keeps an average of its receipt latency
// (measured from the sink's call to its return, whatever its Key), and
// its attempts are spaced by the larger of its
// interval and that latency over Key; with Key deliveries awaiting
// receipt, the first starts when the oldest is expected back. StartIn
// and RoomIn then say 4/s for a key at 10/s with Key 2 and 500 ms
// receipts. Likewise the Drainer's average receipt latency over Total
// spaces the attempts of all keys, as the total cap's interval does when
// it is longer (Pace.Total): keys take turns in the rounds the schedule
// counts. That the Drainer is at Total now is not counted: a key's first
// attempt may come up to one receipt later than said.
//
// # Failures
//
// A failed delivery is retried after an exponential backoff with full
// jitter (Pace.Retry's Backoff and MaxBackoff), in a slot of its key: every
// attempt takes one, so a retry starts when both its backoff has ended and
// the key's next slot has come. A *RetryAfterError from the sink pauses the
// whole key for the time the downstream asked. Other keys go on at their
// rates. With Config.DeadLetter set, a job is given up on after
// Retry.Attempts failed attempts, past Retry.Deadline, or when the sink
// returns a *GiveUpError: it is handed to DeadLetter with the reason and the
// history of its attempts, and leaves the queue once DeadLetter returned
// nil. A message in the queue that is not a job the shaper can have stored
// (queue.Msg.Undecodable: a subject token no key encodes to, a header that
// contradicts its subject) is dead-lettered too, with ReasonUndecodable, at
// once and without taking a slot: its token is drained like a key's.
// Without DeadLetter such a token is left unread.
//
// # Retry budget
//
// Without a budget (Retry.Budget 0) a failed job stays at the head of its
// key: the key's later jobs wait through every backoff, strictly in order.
// With one, a failed job steps aside (unless the downstream asked the key
// to pause: then the job stays at the head, to go first when the pause
// ends): it stays stored, keeping its queue
// slot, its backoff, attempts, deadline and dead letter exactly as at the
// head, while the key's next jobs are read and delivered on the key's slot
// grid. In each slot the key delivers its fresh head, unless a retry is due
// and the budget allows it: each fresh attempt earns b/(1−b) of a retry
// for a budget b, and a retry spends one, so while fresh jobs wait retries
// take at most b of the slots (in any run of n slots, at most b·n plus
// one). A key starts with one retry of credit, so that a lone failure is
// retried as soon as its backoff ends; and a due retry takes any slot no
// fresh job waits for, so no slot is left unused. A key keeps at most 8
// failed jobs aside (maxAside), which bounds the drainer's memory: a
// further failure blocks the key as without a budget until one of them is
// delivered or dead-lettered.
//
// Jobs of a key are thus delivered in order except that a failed job may be
// retried after later jobs. Stats counts the retries (Retries), the due
// retries that gave their slot to a fresh job (RetriesDeferred) and the
// jobs aside now (SteppedAside); KeyStatus.Retrying counts a key's failed
// jobs.
//
// Nothing stepped aside is lost: the jobs stay stored. A Drainer that stops
// delivering (SetActive(false)) forgets them and reads them again when it
// starts. One that starts from scratch reads every stored job. One that
// takes over from another, passive until then, may have trimmed them from
// its list of the key's jobs (see resync): when that list runs out while the
// key's count says jobs are left, it asks Queue.Next for the key's first
// stored jobs, once, and corrects the count. A job stored before the
// activation (Start or SetActive(true)) may have been tried already:
// Config.Resume, when set, says how many failed attempts it had, for the
// first few heads of each key read after the activation.
//
// # Callbacks
//
// Config.OnDeliver, Config.DeadLetter, Config.Resume and Sink.Deliver run on the goroutine
// that runs the step, without the Drainer's lock held. Per key they run one
// at a time and in order: a job's failure is reported before its next
// attempt, its dead letter or the key's next delivery can be, since the key
// stays busy until its events are reported. With Concurrency.Key above 1,
// Sink.Deliver and the events of a key's flights run concurrently, up to
// Key at once: a job's failure is still reported before the job's next
// attempt or dead letter, but the key's other deliveries do not wait for
// it. From inside, a callback may call
// Key, Stats, Active, SetActive and SetPace, and admit jobs to the queue
// (MemQueue.Admit or *queue.Queue.Admit). It must not call Drain or Stop,
// which wait for the steps in flight, its own included, nor Advance.
// Config.Jitter is different: it is called with the lock held and must not
// call the Drainer at all.
package drain
