package drain

import (
	"context"
	"slices"
	"time"
)

// Concurrency bounds the deliveries awaiting their receipt at once (see
// the package docs, "Concurrency"). It is a plain value; the zero
// Concurrency is today's step model: one delivery of a key at a time, and
// no bound over the keys but Config.Workers.
type Concurrency struct {
	// Key is how many deliveries of one key may await their receipt at
	// once. 0 or 1: one at a time, the key's step waits for its receipt.
	Key int
	// Total is how many deliveries of the whole Drainer may await their
	// receipt at once. 0: no bound but Config.Workers, which bounds the
	// steps and deliveries in flight anyway.
	Total int
}

// perKey returns the deliveries of one key that may await a receipt.
func (c Concurrency) perKey() int { return max(c.Key, 1) }

// flies reports whether a key's deliveries run as flights, apart from the
// key's steps: with more than one per key.
func (c Concurrency) flies() bool { return c.Key > 1 }

// latencyWeight is the weight of a new receipt in a key's average receipt
// latency (an exponential moving average).
const latencyWeight = 0.25

// flights is a key's deliveries awaiting their receipt, and what the
// Drainer learnt of how long receipts take. It is guarded by Drainer.mu.
type flights struct {
	latency time.Duration // average time from a delivery's start to its receipt; 0: none measured
	n       int32         // deliveries of the key awaiting their receipt (or reserved by a step)
	blocked bool          // an attempt is due but waits for a receipt (the key's, or the Drainer's: parked)
	// aloft holds the flights themselves, made when the key's first flies:
	// a key whose deliveries are steps (Concurrency.Key 1) has none.
	aloft *aloft
}

// aloft is what a key whose deliveries fly keeps of them.
type aloft struct {
	air  []airborne // the flights in the air, oldest first
	back []tried    // failed jobs whose failure is reported, to take back once the key is not busy
}

// air returns the key's flights in the air, oldest first.
func (f *flights) air() []airborne {
	if f.aloft == nil {
		return nil
	}
	return f.aloft.air
}

// back returns the failed jobs to take back once the key is not busy.
func (f *flights) back() []tried {
	if f.aloft == nil {
		return nil
	}
	return f.aloft.back
}

// flying returns the key's flights, made if it had none.
func (f *flights) flying() *aloft {
	if f.aloft == nil {
		f.aloft = new(aloft)
	}
	return f.aloft
}

// airborne is a flight in the air: its job's sequence, and when it took
// off.
type airborne struct {
	seq uint64
	at  time.Time
}

// flight is one delivery of a key that awaits its receipt apart from the
// key's steps (Concurrency.Key above 1). The step that chose the job
// reserves it; once the step is done and the key released, the worker
// that ran the step hands the job over (fly) and applies the receipt.
type flight struct {
	k         *keyState
	taken     bool // the step took the job off the key: fly hands it over
	t         tried
	scheduled time.Time
	started   time.Time
	took      time.Duration // how long the delivery took (Delivery.Took, or by the clock)
	err       error
}

// average adds a receipt that came took after its delivery started to
// the average receipt latency *avg (0: none yet).
func average(avg *time.Duration, took time.Duration) {
	if *avg == 0 {
		*avg = took
		return
	}
	*avg += time.Duration(latencyWeight * float64(took-*avg))
}

// limited reports whether k may not start another delivery now: it has as
// many awaiting their receipt as its limit, or the Drainer has. The
// reason is remembered so that the key waits for a receipt, not a slot:
// a key at the Drainer's limit is parked until a receipt frees a place.
// d.mu must be held.
func (d *Drainer) limited(k *keyState) bool {
	c := d.pace.Concurrency
	switch {
	case int(k.flight.n) >= c.perKey():
		k.flight.blocked = true
	case c.Total > 0 && d.flying >= c.Total:
		k.flight.blocked = true
		d.parked = append(d.parked, k)
	default:
		k.flight.blocked = false
	}
	return k.flight.blocked
}

// startFlying counts a delivery of k about to start, awaiting its
// receipt. d.mu must be held.
func (d *Drainer) startFlying(k *keyState) {
	k.flight.n++
	d.flying++
}

// landed counts a receipt of k's delivery started at started (zero: it
// did not start), at now, and lets the keys that waited for one go. d.mu
// must be held.
func (d *Drainer) landed(k *keyState, started, now time.Time) {
	k.flight.n--
	d.flying--
	if !started.IsZero() {
		average(&k.flight.latency, now.Sub(started))
		average(&d.latency, now.Sub(started))
	}
	if k.flight.blocked && !k.busy {
		k.flight.blocked = false
		d.place(k, now)
	}
	d.unpark(now)
}

// unpark lets the keys that wait for room under Concurrency.Total try
// again, once there is room: they take it in the order they fall due.
// d.mu must be held.
func (d *Drainer) unpark(now time.Time) {
	if len(d.parked) == 0 || d.pace.Concurrency.Total > 0 && d.flying >= d.pace.Concurrency.Total {
		return
	}
	parked := d.parked
	d.parked = nil
	for _, k := range parked {
		if k.flight.blocked && !k.busy && d.keys[k.token] == k {
			k.flight.blocked = false
			d.place(k, now)
		}
	}
	clear(parked)
	d.parked = parked[:0]
}

// takeOff takes job i of k off the key into f, the key's attempt in its
// slot scheduled at now: the key's slot grid, the total cap's and the
// retry budget's bookkeeping count it as an attempt now. d.mu must be
// held.
func (d *Drainer) takeOff(k *keyState, f *flight, i int, now time.Time) {
	t := k.job(i)
	k.last, k.lastStart = instantOf(f.scheduled), instantOf(now)
	k.next = instantOf(maxTime(nextSlot(f.scheduled, now, d.interval(k)), k.paused.time()))
	if t.retrying {
		d.retries++
		k.spend()
	} else {
		k.earn(d.pace.Retry)
	}
	f.t, f.taken = *t, true
	a := k.flight.flying()
	a.air = append(a.air, airborne{seq: k.drop(i), at: now})
	d.inflight++ // until the flight ends: Drain waits for its receipt
}

// fly hands f's job over, on the worker that ran the step which took it,
// reports the outcome, and lands the flight.
func (d *Drainer) fly(ctx context.Context, f *flight) {
	f.started = d.clock.Now()
	fenced := d.fenced(f.started)
	if !fenced {
		delivery := Delivery{Policy: d.policy, Token: f.k.token, Msg: f.t.msg}
		f.err = d.sink.Deliver(ctx, &delivery)
		if f.took = delivery.Took; f.took <= 0 {
			f.took = d.clock.Now().Sub(f.started)
		}
	}
	m := f.t.msg
	switch {
	case fenced:
		// Not handed over (past the lease's bound): no attempt made.
	case f.err == nil:
		d.delivered.Add(1)
		if d.cfg.OnDeliver != nil {
			d.cfg.OnDeliver(Event{Key: m.Key, ID: m.ID, Attempt: m.Attempt, Enqueued: m.EnqueuedAt,
				Scheduled: f.scheduled, Started: f.started, Attempted: true})
		}
	default:
		d.mu.Lock()
		s := step{k: f.k, err: f.err, started: f.started, scheduled: f.scheduled}
		d.failed(f.k, &f.t, &s, d.clock.Now())
		d.mu.Unlock()
		if d.cfg.OnDeliver != nil {
			d.cfg.OnDeliver(*s.failure) // before the job can be tried again
		}
	}
	d.land(f, fenced)
}

// land applies the receipt of f (fenced: it was not handed over): a
// delivered job keeps its queue slot as one delivered by a step does; any
// other goes back to its key (takeBack), its failure reported already.
// Only then does the flight stop counting toward the key's limit, so that
// no fresh job of the key overtakes a failed one there.
func (d *Drainer) land(f *flight, fenced bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now, k, started := d.clock.Now(), f.k, f.started
	k.flight.leave(f.t.msg.Seq)
	if !fenced && Attempted(f.err) {
		d.observe(k, f.started, f.took, f.err)
	}
	switch {
	case f.err == nil && !fenced:
		k.pend = append(k.pend, f.t.msg.Seq)
		k.pendingAt = instantOf(maxTime(k.pendingAt.time(), started.Add(d.hold)))
	case k.busy:
		a := k.flight.flying()
		a.back = append(a.back, f.t) // taken back when its step ends
	default:
		// Also when the Drainer stopped delivering meanwhile: the key
		// knows the job only so (an activation reads it again, as the
		// key's other jobs, from where the key holds it).
		k.takeBack(f.t, d.pace.Retry, now)
	}
	if fenced {
		started = time.Time{}
	}
	d.tally(k)
	d.landed(k, started, now)
	if !k.busy {
		d.place(k, now) // at its next event: a slot to free, a job back
	}
	d.endInflight()
	d.wakeScheduler()
}

// leave forgets the flight of the job at seq among those in the air.
func (f *flights) leave(seq uint64) {
	if i := slices.IndexFunc(f.air(), func(a airborne) bool { return a.seq == seq }); i >= 0 {
		f.aloft.air = slices.Delete(f.aloft.air, i, i+1)
	}
}

// endInflight counts a step or a flight ended, and wakes the waiters of
// waitIdle once nothing is in flight. d.mu must be held.
func (d *Drainer) endInflight() {
	d.inflight--
	if d.inflight == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
}

// stepLanded counts the end of s's delivery, made by the step itself (one
// delivery of a key at a time) or not made (held: the job stays), at now.
// d.mu must be held.
func (d *Drainer) stepLanded(s *step, now time.Time) {
	switch {
	case s.flight != nil && !s.flight.taken:
		d.landed(s.k, time.Time{}, now)
	case s.flight == nil && s.deliver != nil:
		var started time.Time
		if !s.held() && !s.fenced && Attempted(s.err) {
			started = s.started
		}
		d.landed(s.k, started, now)
	}
}

// keyInterval is the time between two attempts of k that the schedule
// counts: the key's interval, or, when its receipts come slower than its
// slots allow at its concurrency, the average receipt latency measured
// over the deliveries it may have awaiting receipt. d.mu must be held.
func (d *Drainer) keyInterval(k *keyState) time.Duration {
	return max(d.interval(k), k.flight.latency/time.Duration(d.pace.Concurrency.perKey()))
}

// totalInterval is the time between two attempts over all keys that the
// schedule counts: the total cap's interval, or, when receipts come slower
// than Concurrency.Total allows, the average receipt latency over Total;
// 0 for neither. d.mu must be held.
func (d *Drainer) totalInterval() time.Duration {
	interval := d.total()
	if c := d.pace.Concurrency.Total; c > 0 {
		interval = max(interval, d.latency/time.Duration(c))
	}
	return interval
}

// freeAt returns when k has a place for another delivery, at now or
// later: when as many of its flights as it has over its limit less one
// have landed, the oldest first, each after the average receipt latency.
// d.mu must be held.
func (d *Drainer) freeAt(k *keyState, now time.Time) time.Time {
	air := k.flight.air()
	over := len(air) - d.pace.Concurrency.perKey()
	if over < 0 || !d.pace.Concurrency.flies() {
		return now
	}
	return maxTime(air[over].at.Add(k.flight.latency), now)
}

// takeBackAll takes back the failed jobs of k whose flights ended while a
// step of k ran. d.mu must be held, k not busy.
func (d *Drainer) takeBackAll(k *keyState, now time.Time) {
	a := k.flight.aloft
	if a == nil {
		return
	}
	for _, t := range a.back {
		k.takeBack(t, d.pace.Retry, now)
	}
	clear(a.back)
	a.back = a.back[:0]
}

// takeBack puts t, a job of the key whose flight failed (or did not
// reach the downstream), back among the key's jobs at now: a failed job
// with a retry budget aside, as a failed head steps aside; otherwise at
// the head, where a failed job blocks the key's fresh jobs until it is
// delivered or dead-lettered, and a job not attempted goes first at the
// key's next slot; the fresh head goes back to be read again. When the
// head is a failed job already, t waits aside as a retry (a key keeps
// there at most its concurrency more than maxAside). When the key holds
// an older job not yet attempted (it read its jobs again on an activation
// while t was in flight), t is read again too, in its order, as a job
// the activation forgot.
func (k *keyState) takeBack(t tried, retry Retry, now time.Time) {
	fresh := !t.retrying && t.deadReason == ""
	switch {
	case k.unreadBefore(t.msg.Seq):
		k.unread(t.msg.Seq)
	case !fresh && retry.stepsAside() && !t.paused && len(k.aside) < maxAside:
		k.setAside(append(k.aside, t))
	case k.head.msg == nil || k.fresh():
		if k.head.msg != nil {
			k.unread(k.head.msg.Seq)
		}
		k.head = t
	default:
		if fresh {
			t.retrying, t.due = true, maxTime(t.due, now)
		}
		k.setAside(append(k.aside, t))
	}
}

// unreadBefore reports whether the key holds a job older than seq that it
// has not attempted yet: its fresh head, or one to read.
func (k *keyState) unreadBefore(seq uint64) bool {
	if k.fresh() && k.head.msg.Seq < seq {
		return true
	}
	i, _ := slices.BinarySearch(k.seqs, k.from) // those below from are done with
	return i < len(k.seqs) && k.seqs[i] < seq
}

// unread makes the job at seq, off the key, one to read again: back in
// seqs, in order, with the reads starting at it.
func (k *keyState) unread(seq uint64) {
	if i, found := slices.BinarySearch(k.seqs, seq); !found {
		k.seqs = slices.Insert(k.seqs, i, seq)
	}
	k.from = min(k.from, seq)
}

// share returns the concurrency of one of n partitions of a policy: an
// n-th of Total, rounded up and at least one; Key as it is, since a key
// lives in one partition.
func (c Concurrency) share(n int) Concurrency {
	if c.Total > 0 && n > 1 {
		c.Total = max((c.Total+n-1)/n, 1)
	}
	return c
}

// unblock lets every key that waits for a receipt try again at now, under
// a concurrency just changed: a key still at its limit waits again. d.mu
// must be held.
func (d *Drainer) unblock(now time.Time) {
	clear(d.parked)
	d.parked = d.parked[:0]
	for _, k := range d.keys {
		if k.flight.blocked && !k.busy {
			k.flight.blocked = false
			d.place(k, now)
		}
	}
}

// holds appends to seqs the sequences of the key's jobs in flights (in
// the air, or back and not yet taken back), which a seek must skip.
func (f *flights) holds(seqs []uint64) []uint64 {
	for _, a := range f.air() {
		seqs = append(seqs, a.seq)
	}
	for _, t := range f.back() {
		seqs = append(seqs, t.msg.Seq)
	}
	return seqs
}
