package drain

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// Defaults for the zero Config.
const (
	DefaultWorkers     = 32
	DefaultMaxSlotHold = time.Second
	// retryRead is the pause before reading a key's head again after the queue failed.
	retryRead = time.Second
)

// Config holds a Drainer's optional settings. The zero value means the
// documented defaults.
type Config struct {
	// Workers bounds the steps (deliveries, reads, removals) and the
	// deliveries awaiting their receipt (Pace.Concurrency) in flight at
	// once for the policy, when started. Default DefaultWorkers.
	Workers int
	// MaxSlotHold bounds how long a delivered job keeps its queue slot.
	// Default DefaultMaxSlotHold.
	MaxSlotHold time.Duration
	// Logger receives failures. Default: discard.
	Logger *slog.Logger
	// Clock is where the scheduler reads the time and gets its timers.
	// Default: the time package's clock.
	Clock Clock
	// Jitter returns the jitter of a retry's backoff, a number in [0,1).
	// It is called with the Drainer's lock held, so it must not call the
	// Drainer. Default: math/rand/v2's Float64.
	Jitter func() float64
	// OnDeliver, when set, is called after every delivery attempt and every
	// dead-lettering, from the goroutine that ran the step, without the
	// Drainer's lock held. Per key, events come in order, one at a time: a
	// job's failure is reported before its next attempt starts, so before
	// its dead-lettering or the key's next delivery. Events of different
	// keys come concurrently when started. See the package docs for what
	// it may call.
	OnDeliver func(Event)

	// DeadLetter, when set, receives a job the drainer gives up on: after
	// Pace.Retry.Attempts failed attempts (reason FailReason), past its
	// Pace.Retry.Deadline (reason ReasonDeadline), or when the sink says so
	// with a *GiveUpError (its Reason); and a message of the queue that is
	// undecodable (reason ReasonUndecodable, see queue.Msg.Undecodable),
	// without an attempt. The job leaves the queue only once
	// DeadLetter returned nil. Without DeadLetter failed jobs are retried
	// for ever. It is called like OnDeliver, without the lock held.
	DeadLetter func(ctx context.Context, m *queue.Msg, reason string, history []string) error
	// FailReason is the dead-letter reason when attempts run out. Default
	// ReasonDelivery.
	FailReason string
	// CountPauses makes a pause the sink asks for (*RetryAfterError) count
	// as a failed attempt and wait at least the backoff. By default a
	// downstream asking for a pause is honoured exactly and not held against
	// the job.
	CountPauses bool
	// Resume, when set, says how many failed attempts a job had before
	// this Drainer's activation (its Start, or SetActive(true)), by another
	// drainer or before a restart: the job then counts them toward
	// Pace.Retry.Attempts and is delivered with Attempt one more. It is
	// asked only about a job stored before the activation, when it is read
	// as one of the first few heads of its key after it (the jobs a
	// previous drainer can have tried), not about every job. It is called
	// like OnDeliver, without the lock held, and may be called for jobs
	// never tried (it answers 0), with the history of those attempts when
	// it kept one (Event.History), which the job's goes on from. Default:
	// every job starts at its stored Attempt.
	Resume func(ctx context.Context, m *queue.Msg) Resumed
	// Passive starts the Drainer watching but not delivering, until SetActive(true).
	Passive bool
	// WatchedBytes bounds the jobs Watch reported whole (queue.Notice.Job)
	// that an active Drainer keeps for its keys' next reads: each one
	// kept spares a read of the queue (watched.go). Default
	// DefaultWatchedBytes; negative: none is kept. The partitions of a
	// Group share it equally.
	WatchedBytes int
}

// Event describes one delivery attempt or dead-lettering, for metrics,
// job records and benchmarks.
type Event struct {
	Key       string
	ID        string
	Attempt   int
	Enqueued  time.Time // when the job was first accepted (queue.Msg.EnqueuedAt)
	Scheduled time.Time // the slot the delivery was due in
	Started   time.Time // when the sink was called
	Err       error     // nil when delivered
	// History is, of a failed attempt, the job's history so far (the
	// lines a dead letter would carry), for Config.Resume to give back to
	// a drainer that takes the job over.
	History []string
	RetryAt time.Time // when the job may be tried again, after a failure (a retry may wait longer for its key's retry budget)
	Reason  string    // set when the job was dead-lettered instead
	// Failures counts, of a failed attempt, the job's failures that count
	// toward Pace.Retry.Attempts so far: not the pauses the downstream
	// asked for. Paused says the downstream asked the key to pause until
	// RetryAt. Both are for Config.Resume to give back too.
	Failures int
	Paused   bool
	// Attempted says the delivery reached the downstream: true when it was
	// delivered or failed there, false for a pause the sink took without
	// trying (no consumer online, no room for a re-admission) and for a
	// dead-lettering. Only attempts take a slot of the key and count
	// toward the job's attempts.
	Attempted bool
}

// Drainer drains every key of one policy's queue at the pace's outflow
// interval, under its optional total cap, to a Sink. Started, it runs one
// scheduler goroutine and a bounded pool of workers however many keys are
// active, and one watch of the queue to learn which keys have work; driven
// (Advance), it runs the same steps on the caller's goroutine. Jobs of a key
// are delivered one at a time (up to Pace.Concurrency.Key at once: they
// start in order), in order — except, with a retry budget
// (Retry.Budget), that a failed job may be retried after later jobs; a job
// is removed from the queue only after the sink accepted it.
//
// A Drainer is safe for concurrent use. Start it once, or drive it with
// Advance, not both; Drain and Stop are idempotent.
type Drainer struct {
	q      Queue
	sink   Sink
	cfg    Config
	clock  Clock
	policy string
	log    *slog.Logger

	mu        sync.Mutex
	pace      Pace
	hold      time.Duration // how long a delivered job keeps its slot
	keys      map[string]*keyState
	spare     []*keyState // forgotten keys, for reuse
	steps     []*step     // steps of no key, for reuse (newStep, putStep)
	heap      keyHeap
	totalNext time.Time // the next slot under the total cap
	// totalLast and totalLastAt are the last slot granted under the total
	// cap and when: a new pace plans totalNext from them (replan).
	totalLast, totalLastAt time.Time
	waiting                waitTally // keys by their jobs waiting, for the rounds under the total cap (plan.go)
	draining               bool
	active                 bool
	inflight               int
	flying                 int           // deliveries awaiting their receipt (concurrency.go)
	latency                time.Duration // average receipt latency over the keys (concurrency.go)
	parked                 []*keyState   // keys whose due attempt waits for room under Concurrency.Total
	keep                   CapOrder      // the places under the cap to take at the next activation (KeepCapOrder)
	queued                 int64
	counts                 keyCounts // keys with jobs and jobs stepped aside, kept by the keys (keystate.go)
	seen                   seenMark  // the highest sequence the watch reported, and the AwaitSeen calls waiting

	retries         uint64             // attempts of failed jobs
	retriesDeferred uint64             // due retries that gave their slot to a fresh job
	activation      uint64             // activations so far
	resumeUpTo      uint64             // the queue's last sequence at the activation (0: not asked yet)
	idle            chan struct{}      // made by waitIdle, closed when nothing is in flight
	mode            runMode            // how steps run: modeNone until Start or Advance
	stopped         bool               // Stop was called: nothing more is due
	cancel          context.CancelFunc // ends the watch, and the goroutines of Start
	calls           queueCalls         // the context of the steps' queue calls (outage.go)
	adaptive        adaptive           // the adaptive rates, with Pace.Adapt (adaptive.go)
	watched         watchedJobs        // jobs Watch reported whole, for the keys' next reads (watched.go)

	kick        chan struct{}
	tasks       chan *step
	drivenSteps []*step // Advance's steps at hand, kept for their room

	delivered atomic.Uint64
	failures  atomic.Uint64
	dead      atomic.Uint64

	// fence is the end of the drain lease deliveries start under (HoldUntil),
	// read without the lock right before each delivery; nil: no bound.
	fence atomic.Pointer[time.Time]

	debug bool // log every stored job and every step (--log-level debug)

	stopOnce, drainOnce sync.Once
	wg                  sync.WaitGroup
}

// runMode is how a Drainer runs its steps.
type runMode uint8

// Modes of a Drainer.
const (
	modeNone    runMode = iota
	modeStarted         // Start: scheduler goroutine and workers
	modeDriven          // Advance: the caller's goroutine
)

// New returns a Drainer for the jobs of q, delivered to sink at pace.
func New(q Queue, sink Sink, pace Pace, cfg Config) *Drainer {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.MaxSlotHold <= 0 {
		cfg.MaxSlotHold = DefaultMaxSlotHold
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	if cfg.FailReason == "" {
		cfg.FailReason = ReasonDelivery
	}
	if cfg.WatchedBytes == 0 {
		cfg.WatchedBytes = DefaultWatchedBytes
	}
	d := &Drainer{
		active:     !cfg.Passive,
		activation: 1,
		q:          q,
		sink:       sink,
		cfg:        cfg,
		clock:      cfg.Clock,
		policy:     q.Policy(),
		log:        cfg.Logger.With("policy", q.Policy()),
		keys:       make(map[string]*keyState),
		kick:       make(chan struct{}, 1),
		tasks:      make(chan *step, cfg.Workers),
	}
	d.debug = d.log.Enabled(context.Background(), slog.LevelDebug)
	d.setPace(pace)
	return d
}

// SetPace applies a changed pace. A new interval or total cap re-plans
// the slots keys wait for at once: a key's next slot becomes its last
// attempt's slot plus the new interval (never sooner than the new rate
// allows since that attempt; later if the downstream asked the key to
// pause), and the slots reserved under the total cap are given up and
// taken again from the last one granted plus the new total interval. A
// new adaptation (Pace.Adapt) re-plans them too, at the effective
// interval; a lower ceiling clamps it at once. New retry bounds apply from
// the next failure.
func (d *Drainer) SetPace(p Pace) {
	d.mu.Lock()
	old := d.pace
	d.setPace(p)
	if p.Interval != old.Interval || p.Total != old.Total || p.Adapt != old.Adapt {
		d.replan(d.clock.Now())
	}
	if p.Concurrency != old.Concurrency {
		d.unblock(d.clock.Now())
	}
	d.mu.Unlock()
	d.wakeScheduler()
}

// replan moves the slots keys wait for to the pace just set (see SetPace).
// A key in a step is left to it: its step completes with the new pace.
// d.mu must be held.
func (d *Drainer) replan(now time.Time) {
	switch {
	case d.total() <= 0:
		d.totalNext = time.Time{}
	case !d.totalLast.IsZero():
		d.totalNext = nextSlot(d.totalLast, d.totalLastAt, d.total())
	}
	for _, k := range d.keys {
		if k.busy {
			if k.reserved && k.head.msg == nil { // a slot reserved for the read in flight (reserveForRead)
				k.next, k.reserved = instantOf(maxTime(k.paused.time(), now)), false
			}
			continue
		}
		if k.last != never {
			k.next = instantOf(maxTime(nextSlot(k.last.time(), k.lastStart.time(), d.interval(k)), k.paused.time()))
		} else if k.reserved {
			k.next = instantOf(maxTime(k.paused.time(), now))
		}
		k.reserved = false
		d.place(k, now)
	}
}

func (d *Drainer) setPace(p Pace) {
	d.pace = p
	d.hold = slotHold(p.Interval, d.cfg.MaxSlotHold)
	d.setAdapt()
}

// Start begins draining in the background; it returns at once. ctx bounds
// the Drainer's whole life, like Stop. It does nothing on a Drainer already
// started, driven or stopped.
func (d *Drainer) Start(ctx context.Context) {
	d.mu.Lock()
	if d.mode != modeNone || d.stopped {
		d.mu.Unlock()
		return
	}
	d.mode = modeStarted
	ctx, d.cancel = context.WithCancel(ctx)
	d.calls.start(ctx)
	d.wg.Add(3 + d.cfg.Workers)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		d.resyncWhilePassive(ctx)
	}()
	go func() {
		defer d.wg.Done()
		if err := d.q.Watch(ctx, d.notice); err != nil {
			d.log.Error("drain: watch failed: no new keys will be drained", "err", err)
		}
	}()
	go func() {
		defer d.wg.Done()
		d.schedule(ctx)
	}()
	for range d.cfg.Workers {
		go func() {
			defer d.wg.Done()
			d.work(ctx)
		}()
	}
}

// Drain stops starting deliveries, waits until those in flight have ended,
// and frees the slots of delivered jobs. Queued jobs stay in the queue. It
// returns early with ctx's error. It must not be called from a callback:
// it would wait for the step calling back.
func (d *Drainer) Drain(ctx context.Context) error {
	d.drainOnce.Do(func() {
		d.mu.Lock()
		d.draining = true
		d.mu.Unlock()
	})
	err := d.waitIdle(ctx)
	// Free the slots of delivered jobs even when ctx ran out: otherwise a
	// restart delivers them again.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	return errors.Join(err, d.freeDelivered(rctx))
}

// Stop ends the Drainer at once and waits for its goroutines. A delivery cut
// short stays queued and is delivered again later. It must not be called
// from a callback.
func (d *Drainer) Stop() {
	d.stopOnce.Do(func() {
		d.mu.Lock()
		d.stopped = true
		cancel := d.cancel
		d.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		d.wg.Wait()
	})
}

// SetActive starts (true) or stops (false) deliveries, leaving the watch of
// the queue running: a shaper that does not own a policy's drain still knows
// its keys' depths. Steps in flight finish. Each key forgets the jobs it
// read, its failed jobs included, which stay queued; on activation every
// key with jobs reads them again, since another drainer may have delivered
// some.
func (d *Drainer) SetActive(active bool) {
	d.mu.Lock()
	if d.active != active {
		d.active = active
		now := d.clock.Now()
		if active {
			d.activation++
			d.resumeUpTo = 0
		} else {
			d.watched.clear() // another drainer may remove them from now on
		}
		for _, k := range d.keys {
			if active {
				k.resumeLeft = resumeReads
			}
			if k.busy {
				continue
			}
			// Jobs another drainer removed meanwhile are skipped when their
			// read finds them gone.
			k.reread()
			if active {
				// The slots reserved under the cap when it last stopped
				// are gone with the time; an inactive drainer keeps them,
				// to answer as it would have delivered and for the next
				// drainer (CapOrder).
				k.reserved = false
			}
			if active && k.depth > 0 {
				k.fetch, k.fetchAt = true, instantOf(now)
			}
			d.place(k, now)
		}
		if active {
			d.keepCapOrder(now)
		}
	}
	d.mu.Unlock()
	d.wakeScheduler()
}

// Active reports whether the Drainer delivers.
func (d *Drainer) Active() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.active
}

func (d *Drainer) wakeScheduler() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// seqOf returns m's sequence, 0 for nil, for the debug log.
func seqOf(m *queue.Msg) uint64 {
	if m == nil {
		return 0
	}
	return m.Seq
}
