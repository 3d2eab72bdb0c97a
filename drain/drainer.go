package drain

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// Reasons a job is dead-lettered with.
const (
	ReasonDelivery = "delivery" // delivery attempts ran out
	ReasonAttempts = "attempts" // deferral attempts ran out
	ReasonDeadline = "deadline" // retry.deadline passed
)

// Defaults for the zero Config.
const (
	DefaultWorkers     = 32
	DefaultMaxSlotHold = time.Second
	// retryRead is the pause before reading a key's head again after JetStream failed.
	retryRead = time.Second
)

// Config holds a Drainer's optional settings. The zero value means the
// documented defaults.
type Config struct {
	// Workers bounds the steps (deliveries, reads, removals) in flight at
	// once for the policy. Default DefaultWorkers.
	Workers int
	// MaxSlotHold bounds how long a delivered job keeps its queue slot.
	// Default DefaultMaxSlotHold.
	MaxSlotHold time.Duration
	// Logger receives failures. Default: discard.
	Logger *slog.Logger
	// OnDeliver, when set, is called after every delivery attempt from the
	// worker that made it. It must be fast and safe for concurrent use.
	OnDeliver func(Event)

	// DeadLetter, when set, receives a job the drainer gives up on: after
	// the policy's retry.attempts failed attempts (reason FailReason), past
	// its retry.deadline (reason "deadline"), or when the sink says so with
	// a *GiveUpError. The job leaves the queue only once DeadLetter returned
	// nil. Without DeadLetter failed jobs are retried for ever.
	DeadLetter func(ctx context.Context, m *queue.Msg, reason string, history []string) error
	// FailReason is the dead-letter reason when attempts run out. Default "delivery".
	FailReason string
	// CountPauses makes a pause the sink asks for (*RetryAfterError) count
	// as a failed attempt and wait at least the backoff. By default a
	// downstream asking for a pause is honoured exactly and not held against
	// the job.
	CountPauses bool
	// Passive starts the Drainer watching but not delivering, until SetActive(true).
	Passive bool
}

// Event describes one delivery attempt, for metrics and benchmarks.
type Event struct {
	Key       string
	ID        string
	Attempt   int
	Scheduled time.Time // the slot the delivery was due in
	Started   time.Time // when the sink was called
	Err       error     // nil when delivered
	RetryAt   time.Time // when the job is tried again, after a failure
	Reason    string    // set when the job was dead-lettered instead
}

// Drainer drains every key of one policy's queue at the policy's outflow
// rate, under its optional total cap, to a Sink. It runs one scheduler
// goroutine and a bounded pool of workers however many keys are active, and
// one headers-only watch of the queue to learn which keys have work. Jobs of
// a key are delivered one at a time, in order; a job is removed from the
// queue only after the sink accepted it.
//
// A Drainer is safe for concurrent use. Start it once; Drain and Stop are
// idempotent.
type Drainer struct {
	q    *queue.Queue
	sink Sink
	cfg  Config
	log  *slog.Logger

	mu        sync.Mutex
	pol       policies.Policy
	interval  time.Duration // per key
	totalIv   time.Duration // per policy, 0 without a cap
	hold      time.Duration
	keys      map[string]*keyState
	heap      keyHeap
	totalNext time.Time
	draining  bool
	active    bool
	inflight  int
	queued    int64
	idle      chan struct{} // closed when draining and nothing is in flight

	kick  chan struct{}
	tasks chan *step

	delivered atomic.Uint64
	failedN   atomic.Uint64
	dead      atomic.Uint64

	debug bool // log every stored job and every step (--log-level debug)

	startOnce, stopOnce, drainOnce sync.Once
	cancel                         context.CancelFunc
	wg                             sync.WaitGroup
}

// New returns a Drainer for the jobs of q, delivered to sink under policy p.
func New(q *queue.Queue, sink Sink, p policies.Policy, cfg Config) *Drainer {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.MaxSlotHold <= 0 {
		cfg.MaxSlotHold = DefaultMaxSlotHold
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.FailReason == "" {
		cfg.FailReason = ReasonDelivery
	}
	d := &Drainer{
		active: !cfg.Passive,
		q:      q,
		sink:   sink,
		cfg:    cfg,
		log:    cfg.Logger.With("policy", p.Name),
		keys:   make(map[string]*keyState),
		idle:   make(chan struct{}),
		kick:   make(chan struct{}, 1),
		tasks:  make(chan *step, cfg.Workers),
	}
	d.debug = d.log.Enabled(context.Background(), slog.LevelDebug)
	d.setPolicy(p)
	return d
}

// seqOf returns m's sequence, 0 for nil, for the debug log.
func seqOf(m *queue.Msg) uint64 {
	if m == nil {
		return 0
	}
	return m.Seq
}

// SetPolicy applies a changed rate or total cap; it takes effect from each
// key's next slot.
func (d *Drainer) SetPolicy(p policies.Policy) {
	d.mu.Lock()
	d.setPolicy(p)
	d.mu.Unlock()
	d.wakeScheduler()
}

func (d *Drainer) setPolicy(p policies.Policy) {
	d.pol = p
	d.interval = p.Outflow.Interval()
	d.totalIv = p.Total.Interval()
	d.hold = slotHold(d.interval, d.cfg.MaxSlotHold)
}

// Start begins draining in the background; it returns at once. ctx bounds
// the Drainer's whole life, like Stop.
func (d *Drainer) Start(ctx context.Context) {
	d.startOnce.Do(func() {
		ctx, d.cancel = context.WithCancel(ctx)
		d.wg.Add(3 + d.cfg.Workers)
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
	})
}

// Drain stops starting deliveries, waits until those in flight have ended,
// and frees the slots of delivered jobs. Queued jobs stay in JetStream. It
// returns early with ctx's error.
func (d *Drainer) Drain(ctx context.Context) error {
	d.drainOnce.Do(func() {
		d.mu.Lock()
		d.draining = true
		if d.inflight == 0 {
			close(d.idle)
		}
		d.mu.Unlock()
	})
	var errs []error
	select {
	case <-d.idle:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	d.mu.Lock()
	var pend []uint64
	for _, k := range d.keys {
		pend = append(pend, k.pend...)
	}
	d.mu.Unlock()
	// Free the slots of delivered jobs even when ctx ran out: otherwise a
	// restart delivers them again.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, seq := range pend {
		if err := d.q.Remove(rctx, seq); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(errs...)
}

// Stop ends the Drainer at once and waits for its goroutines. A delivery cut
// short stays queued and is delivered again later.
func (d *Drainer) Stop() {
	d.stopOnce.Do(func() {
		if d.cancel != nil {
			d.cancel()
		}
		d.wg.Wait()
	})
}

// resyncPeriod is how often a passive Drainer reads its keys' depths from
// JetStream: it sees every job stored, through Watch, but not the jobs the
// active drainer (on another shaper) removes.
const resyncPeriod = 2 * time.Second

func (d *Drainer) resyncWhilePassive(ctx context.Context) {
	t := time.NewTicker(resyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if d.Active() {
			continue
		}
		// Note what was reported before asking: jobs reported later are not
		// in the answer's counts.
		d.mu.Lock()
		seen := make(map[string]uint64, len(d.keys))
		for tok, k := range d.keys {
			seen[tok] = k.notified
		}
		d.mu.Unlock()
		depths, err := d.q.TokenDepths(ctx)
		if err != nil {
			continue
		}
		d.mu.Lock()
		if !d.active {
			d.queued = 0
			for tok, k := range d.keys {
				hw, ok := seen[tok]
				if !ok {
					d.queued += k.depth // made after the snapshot: its count is its own
					continue
				}
				k.depth = int64(depths[tok]) + int64(countAbove(k.seqs, hw))
				d.queued += k.depth
				// The active drainer removes a key's jobs oldest first: of the
				// jobs reported before the snapshot, the ones left are the
				// newest depths[tok].
				trimOldest(&k.seqs, hw, int(depths[tok]))
				if k.depth == 0 && !k.busy && k.held == nil {
					d.heap.drop(k)
					delete(d.keys, tok)
				}
			}
		}
		d.mu.Unlock()
	}
}

// countAbove counts the sequences in seqs (ascending) above hw.
func countAbove(seqs []uint64, hw uint64) int {
	n := 0
	for i := len(seqs) - 1; i >= 0 && seqs[i] > hw; i-- {
		n++
	}
	return n
}

// trimOldest drops the oldest of the sequences at or below hw in *seqs
// (ascending), keeping keep of them and every sequence above hw.
func trimOldest(seqs *[]uint64, hw uint64, keep int) {
	upTo := len(*seqs) - countAbove(*seqs, hw)
	if drop := upTo - keep; drop > 0 {
		*seqs = append((*seqs)[:0], (*seqs)[drop:]...)
	}
}

// Stats is a snapshot of a Drainer's figures.
type Stats struct {
	Keys      int    `json:"keys"`      // keys with jobs queued
	Queued    int64  `json:"queued"`    // jobs queued over all keys (including those in delivery)
	Delivered uint64 `json:"delivered"` // deliveries accepted by the sink
	Failed    uint64 `json:"failed"`    // delivery attempts that failed
	Dead      uint64 `json:"dead"`      // jobs dead-lettered by this drainer since start
	InFlight  int    `json:"in_flight"` // steps running now
}

// Stats returns the Drainer's current figures.
func (d *Drainer) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, k := range d.keys {
		if k.depth > 0 {
			n++
		}
	}
	return Stats{Keys: n, Queued: d.queued, Delivered: d.delivered.Load(), Failed: d.failedN.Load(), Dead: d.dead.Load(), InFlight: d.inflight}
}

// KeyStatus is what a Drainer can tell about one key, for the answers to
// producers.
type KeyStatus struct {
	Queued  int64         // jobs stored for the key, as far as the drainer has seen
	Waiting int64         // of those, jobs not yet delivered
	Seen    uint64        // highest sequence of the key the drainer has seen stored
	RoomIn  time.Duration // time until a slot of the key frees
	NextIn  time.Duration // time until the key's next delivery may start
}

// Key returns the status of the key with token token at now. For a key the
// Drainer has not seen, Queued is 0 and RoomIn is one outflow interval.
func (d *Drainer) Key(token string, now time.Time) KeyStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.keys[token]
	if k == nil {
		return KeyStatus{RoomIn: d.interval}
	}
	st := KeyStatus{Queued: k.depth, Waiting: max(k.depth-int64(len(k.pend)), 0), Seen: k.notified}
	var room time.Time
	switch {
	case len(k.pend) > 0:
		room = k.pendingAt
	case k.held != nil:
		room = k.due.Add(d.hold)
	case k.busy:
		room = now.Add(d.hold)
	default:
		room = maxTime(k.next, now).Add(d.hold)
	}
	st.RoomIn = max(room.Sub(now), 0)
	next := maxTime(k.next, now)
	if k.held != nil {
		next = maxTime(k.due, now)
	}
	st.NextIn = next.Sub(now)
	return st
}

// SetActive starts (true) or stops (false) deliveries, leaving the watch of
// the queue running: a shaper that does not own a policy's drain still knows
// its keys' depths. Steps in flight finish. On activation every key with
// jobs reads its head again, since another drainer may have delivered some.
func (d *Drainer) SetActive(active bool) {
	d.mu.Lock()
	if d.active != active {
		d.active = active
		now := time.Now()
		for _, k := range d.keys {
			if k.busy {
				continue
			}
			k.held, k.bury, k.fails, k.history = nil, "", 0, nil
			k.reserved = false
			// k.seqs stays: jobs another drainer removed meanwhile are skipped
			// when their read finds them gone.
			if active && k.depth > 0 {
				k.fetch, k.fetchAt = true, now
			}
			d.place(k)
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

// notice records a job Watch saw stored, and wakes an idle key.
func (d *Drainer) notice(n queue.Notice) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.keys[n.Token]
	if k == nil {
		name, err := n.Key()
		if err != nil {
			return // not a job Admit stored: no key to drain it under
		}
		// Watch reports every job of the stream, in order, from the first:
		// a key's state made at its first notice knows all its jobs.
		k = &keyState{token: n.Token, name: name, idx: -1}
		d.keys[n.Token] = k
	}
	if n.Seq <= k.notified {
		return
	}
	k.notified = n.Seq
	if n.Seq >= k.from {
		k.seqs = append(k.seqs, n.Seq)
	}
	if _, ok := k.early[n.Seq]; ok {
		delete(k.early, n.Seq)
	} else {
		k.depth++
		d.queued++
	}
	if d.debug {
		d.log.Debug("drain: stored", "key", k.name, "seq", n.Seq, "depth", k.depth, "busy", k.busy,
			"held", seqOf(k.held), "fetch", k.fetch, "active", d.active)
	}
	switch {
	case k.busy:
		k.wake = true
	case k.held == nil && !k.fetch && d.active:
		k.fetch = true
		k.fetchAt = time.Now()
		d.place(k)
		d.wakeScheduler()
	}
}

// removed records that the job at seq of k left the queue.
func (d *Drainer) removed(k *keyState, seq uint64) {
	if seq <= k.notified {
		k.depth--
		d.queued--
		return
	}
	if k.early == nil {
		k.early = make(map[uint64]struct{})
	}
	k.early[seq] = struct{}{}
}

// place puts k in the heap at its next event, out of it when busy, and
// forgets a key that has nothing left to do once its pacing no longer matters.
func (d *Drainer) place(k *keyState) {
	if k.busy {
		d.heap.drop(k)
		return
	}
	if at, ok := k.nextEvent(); ok {
		d.heap.place(k, at)
		return
	}
	d.heap.drop(k)
	if k.depth <= 0 && len(k.early) == 0 && !time.Now().Before(k.next) {
		delete(d.keys, k.token)
	} else if k.depth <= 0 && len(k.early) == 0 {
		d.heap.place(k, k.next) // look again when its pacing has lapsed
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// retryWait is the pause before the next attempt after fails failed deliveries.
func (d *Drainer) retryWait(fails int) time.Duration {
	base, ceil := d.pol.Retry.Backoff, d.pol.Retry.MaxBackoff
	if base <= 0 {
		base = policies.DefaultRetryBackoff
	}
	if ceil < base {
		ceil = max(base, policies.DefaultRetryMaxBackoff)
	}
	return backoff(fails, base, ceil, rand.Float64())
}

var _ heap.Interface = (*keyHeap)(nil)
