package drain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// step is the I/O a worker does for one key at one time, in this order:
// free the slots of jobs delivered before, deliver one job of the key — its
// head, or a failed job stepped aside — or dead-letter one, read the new
// head. Freeing first means that a job is handed to the sink only once the
// key's job delivered before has left the queue: a drainer killed at any
// moment leaves at most one delivered job per key stored, which is all a
// take-over delivers again. The read needs neither, and a started Drainer
// runs it alongside them (planRead). The scheduler fills in the plan under the
// Drainer's lock; run does the I/O without it; complete applies the results
// under it again.
type step struct {
	k          *keyState
	deliver    *queue.Msg
	deadLetter *queue.Msg // dead-letter this job instead of delivering it
	job        int        // which job of the key is delivered or dead-lettered: headJob, or its index in aside
	reason     string
	history    []string
	scheduled  time.Time
	chosen     time.Time // when the step took the job (under d.mu): its delivery starts about then
	remove     []uint64
	read       bool
	readLater  bool      // the head is delivered and the next one read shortly before its slot (headLead)
	readSince  time.Time // when the read fell due (headAt)
	from       uint64
	exact      []uint64        // read the head at the first of these sequences still stored; seeking, skip these
	watched    *queue.Msg      // the job at exact[0], reported whole by Watch: read without a request
	seek       bool            // read the first job of the key stored from `from` on (Queue.Next)
	alongside  bool            // read the head on a goroutine of its own, alongside the removals and the hand-over
	reading    sync.WaitGroup  // that read
	resume     bool            // ask Config.Resume about a head stored before activation
	resumeUpTo uint64          // the queue's last sequence at activation (0: ask it)
	activation uint64          // the activation resumeUpTo belongs to
	qctx       context.Context // of the queue calls (outage.go); nil: run's
	gen        uint64          // the queue calls' generation the step began in

	// results
	fenced    bool // the delivery or dead letter did not start: past the lease's bound (HoldUntil)
	started   time.Time
	took      time.Duration // how long the delivery took (Delivery.Took, or by the clock)
	err       error
	deadErr   error
	removeOK  bool
	removeErr error
	head      *queue.Msg
	readErr   error
	missing   []uint64 // exact sequences found gone
	failure   *Event   // the failed delivery, reported once complete
	before    Resumed  // the head's attempts before activation, by Resume

	delivery Delivery // what the sink is handed
	flight   *flight  // the job goes on a flight of its own once the step is done (Concurrency.Key above 1)
}

// reset empties s for a new step of k (nil: none), keeping its slices'
// room.
func (s *step) reset(k *keyState) *step {
	remove, exact, missing := s.remove[:0], s.exact[:0], s.missing[:0]
	*s = step{k: k, remove: remove, exact: exact, missing: missing}
	return s
}

// newStep gives k a step from the Drainer's pool. d.mu must be held.
func (d *Drainer) newStep(k *keyState) *step {
	var s *step
	if n := len(d.steps); n > 0 {
		s, d.steps = d.steps[n-1], d.steps[:n-1]
	} else {
		s = new(step) // only then: it escapes, so made first it was made every time
	}
	k.step = s
	return s.reset(k)
}

// putStep takes k's step back into the Drainer's pool once k is released,
// emptied: a pooled step keeps no job (its payload and headers) alive, and
// a key waiting for its slot carries no step. d.mu must be held.
func (d *Drainer) putStep(k *keyState) {
	if s := k.step; s != nil {
		k.step = nil
		d.steps = append(d.steps, s.reset(nil))
	}
}

// held reports whether s's job was not handed over because a slot before
// it was not freed.
func (s *step) held() bool { return s.deliver != nil && len(s.remove) > 0 && !s.removeOK }

// resumed reports whether s read a head stored before activation, which
// Config.Resume was asked about.
func (s *step) resumed() bool { return s.resume && s.head != nil && s.head.Seq <= s.resumeUpTo }

// run does s's I/O, without the Drainer's lock, and reports a delivery or
// a dead letter as soon as it happened. A read planned alongside the rest
// (planRead) runs on a goroutine of its own; when the job it comes after
// stays the head (its delivery failed, was held or fenced), it is dropped,
// as if it had not been made.
func (d *Drainer) run(ctx context.Context, s *step) {
	qctx := s.queueCtx(ctx)
	alongside := s.read && s.alongside
	if alongside {
		s.reading.Go(func() { d.readHead(ctx, qctx, s) })
	}
	d.handOver(ctx, qctx, s)
	switch {
	case alongside:
		s.reading.Wait()
		if !s.read {
			s.head, s.readErr, s.missing, s.before = nil, nil, s.missing[:0], Resumed{}
		}
	case s.read:
		d.readHead(ctx, qctx, s)
	}
}

// handOver does s's I/O but the read of the head: the removals, then the
// delivery or the dead letter. It clears s.read when the job the read
// comes after stays the head.
func (d *Drainer) handOver(ctx, qctx context.Context, s *step) {
	if len(s.remove) > 0 {
		s.removeOK = true
		for _, seq := range s.remove {
			if err := d.q.Remove(qctx, seq); err != nil {
				s.removeOK, s.removeErr = false, err
				d.log.Warn("drain: free slot", "key", s.k.name, "seq", seq, "err", err)
				break
			}
		}
	}
	switch {
	case s.held():
		s.read = s.read && s.job != headJob // the head stays
	case s.flight != nil:
		// Handed over by fly once the step is done and the key released.
	case s.deliver != nil:
		s.started = d.clock.Now()
		if d.fenced(s.started) {
			// The lease may have passed to another shaper while this one
			// was frozen between scheduling and now: hand nothing over.
			s.fenced = true
			s.read = s.read && s.job != headJob // the head stays
			break
		}
		s.delivery = Delivery{Policy: d.policy, Token: s.k.token, Msg: s.deliver}
		s.err = d.sink.Deliver(ctx, &s.delivery)
		if s.took = s.delivery.Took; s.took <= 0 {
			s.took = d.clock.Now().Sub(s.started)
		}
		if s.err != nil {
			s.read = s.read && s.job != headJob // the head stays
		} else {
			d.delivered.Add(1)
			if d.cfg.OnDeliver != nil {
				d.cfg.OnDeliver(Event{Key: s.deliver.Key, ID: s.deliver.ID, Attempt: s.deliver.Attempt,
					Enqueued: s.deliver.EnqueuedAt, Scheduled: s.scheduled, Started: s.started, Attempted: true})
			}
		}
	}
	if s.deadLetter != nil && d.fenced(d.clock.Now()) {
		s.fenced = true // another shaper may be delivering it now
		s.read = s.read && s.job != headJob
	} else if s.deadLetter != nil {
		s.deadErr = d.cfg.DeadLetter(ctx, s.deadLetter, s.reason, s.history)
		if s.deadErr == nil {
			s.deadErr = d.q.Remove(qctx, s.deadLetter.Seq)
		}
		if s.deadErr != nil {
			s.read = s.read && s.job != headJob // the head stays
			d.log.Warn("drain: dead-letter", "key", s.k.name, "job", s.deadLetter.ID, "reason", s.reason, "err", s.deadErr)
		} else {
			d.dead.Add(1)
			if d.cfg.OnDeliver != nil {
				d.cfg.OnDeliver(Event{Key: s.deadLetter.Key, ID: s.deadLetter.ID, Attempt: s.deadLetter.Attempt,
					Enqueued: s.deadLetter.EnqueuedAt, Reason: s.reason, Started: d.clock.Now()})
			}
		}
	}
}

// readHead reads s's key's head: the first of the exact sequences still
// stored, or when seeking, the first job stored from s.from on that the key
// does not hold already. A head stored before activation is resumed. The
// queue calls run with qctx (outage.go), Config.Resume with ctx.
func (d *Drainer) readHead(ctx, qctx context.Context, s *step) {
	switch {
	case s.watched != nil:
		s.head = s.watched
	case s.seek:
		from := s.from
		for {
			s.head, s.readErr = d.q.Next(qctx, s.k.token, from)
			if s.readErr != nil || !slices.Contains(s.exact, s.head.Seq) {
				break
			}
			from = s.head.Seq + 1 // a job the key holds already
		}
	default:
		var last uint64 // the queue's last sequence, asked at most once a step
		for _, seq := range s.exact {
			s.head, s.readErr = d.readAt(qctx, s.k, seq, &last)
			if !errors.Is(s.readErr, queue.ErrEmpty) {
				break
			}
			s.missing = append(s.missing, seq)
		}
	}
	if s.head == nil && s.readErr == nil {
		s.readErr = queue.ErrEmpty
	}
	if s.head == nil || !s.resume {
		return
	}
	if s.resumeUpTo == 0 {
		last, err := d.q.LastSeq(qctx)
		if err != nil {
			s.head, s.readErr = nil, fmt.Errorf("drain: resume: %w", err)
			return
		}
		s.resumeUpTo = last
	}
	if s.resumed() {
		if r := d.cfg.Resume(ctx, s.head); r.Attempts > 0 {
			s.before = r
			s.head.Attempt = max(s.head.Attempt, r.Attempts+1)
		}
	}
}

// readsLate reports whether k reads its next head shortly before its next
// slot rather than as soon as the one before is delivered (headLead).
// d.mu must be held.
func (d *Drainer) readsLate(k *keyState) bool {
	return !d.pace.Concurrency.flies() && d.keyInterval(k) > 2*headLead
}

// headReadAt returns when k reads its head, if it must: at fetchAt, or when k
// reads late, not before headLead ahead of its next slot, which follows
// the slot as a new pace moves it — or, when k frees a delivered job's
// slot within that lead (slotHold), not before it frees it, in the same
// step: one step less per delivery, whose wake-ups cost a key at 1/s as
// much CPU as its queue calls. A seek (jobs the key may have lost) is not
// held back. d.mu must be held.
func (d *Drainer) headReadAt(k *keyState) time.Time {
	if k.seek || !d.readsLate(k) {
		return k.fetchAt.time()
	}
	next, pendingAt := k.next.time(), k.pendingAt.time()
	at := next.Add(-headLead)
	if len(k.pend) > 0 && pendingAt.After(at) && pendingAt.Before(next) {
		at = pendingAt
	}
	return maxTime(k.fetchAt.time(), at)
}

// planRead fills in how s reads k's head: by the sequences Watch reported,
// or when seeking, from where the seek is, skipping the jobs k holds; and
// whether to ask Config.Resume about it. d.mu must be held.
func (d *Drainer) planRead(k *keyState, s *step) {
	if s.seek {
		s.from = k.seekFrom
		s.exact = append(s.exact, k.pend...)
		for i := range k.aside {
			s.exact = append(s.exact, k.aside[i].msg.Seq)
		}
		s.exact = k.flight.holds(s.exact)
	} else {
		d.unwatchBelow(k, s.from)
		s.exact = k.readPlan(s.exact, s.from)
		s.watched = d.takeWatched(k, s.exact)
	}
	if d.cfg.Resume != nil && k.resumeLeft > 0 {
		s.resume, s.resumeUpTo, s.activation = true, d.resumeUpTo, d.activation
	}
	// A started Drainer reads the head alongside the step's other I/O: the
	// read needs nothing of the removals or the hand-over, so a step waits
	// for two round trips instead of three. Not after a head whose last
	// attempt failed: that one is likely to stay the head, and the read to
	// be dropped (a subject without consumers is probed every few seconds).
	other := len(s.remove) > 0 || s.deadLetter != nil || s.deliver != nil && s.flight == nil
	failed := s.deliver != nil && s.job == headJob && (k.head.retrying || len(k.head.history) > 0)
	s.alongside = d.mode == modeStarted && other && !failed
}

// applyRead applies the read of k's head by s at now; a failed read is
// tried again at retryAt. d.mu must be held.
func (d *Drainer) applyRead(k *keyState, s *step, now, retryAt time.Time) {
	if d.resumeUpTo == 0 && s.activation == d.activation {
		d.resumeUpTo = s.resumeUpTo // asked of the queue by s, if not 0
	}
	switch {
	case s.head != nil:
		k.headAt(s.head, s.readSince, now, d.interval(k))
		if s.seek {
			k.seekFrom = s.head.Seq + 1
		}
		switch {
		case s.resumed():
			k.resumeLeft--
			if s.before.Attempts > 0 {
				d.resumed(k, &k.head, s.before, now)
			}
		case s.resume:
			k.resumeLeft = 0 // this job and the later ones were stored after activation
		}
		if s.head.Undecodable != "" {
			d.undecodable(k, now)
		}
	case errors.Is(s.readErr, queue.ErrEmpty):
		if s.seek {
			// Nothing stored that the key does not know of: the depth
			// counted jobs another drainer removed.
			k.unsure = false
			if lost := k.depth - k.known(); lost > 0 {
				k.setDepth(k.depth - lost)
				d.queued -= lost
			}
		}
		if len(k.seqs) > 0 {
			k.wake = true // reported jobs left to try
		}
		switch {
		case k.wake:
			k.wake = false
			k.fetch, k.fetchAt = true, instantOf(now)
		case k.lost():
			k.fetch, k.fetchAt, k.seek = true, instantOf(now), true
		case k.head.msg == nil && len(k.seqs) == 0:
			k.unsure = false // every job counted is one the key knows
		}
		d.giveBack(k)
	default:
		d.log.Warn("drain: read head", "key", k.name, "err", s.readErr)
		k.fetch, k.fetchAt, k.seek = true, instantOf(retryAt), s.seek
		k.retry |= retryFetch
	}
}

// readAt reads k's job at seq. It answers ErrEmpty only for a job gone for
// good (removed by the drainer this one took over from): a job not found is
// gone only when the queue (the stream leader) has stored past it and a
// second read still misses it, since in a cluster the server running the
// watch can store a job before the leader that answers reads does (seen: a
// job skipped, and left queued, in a steady R3 cluster). *last caches the
// last sequence across the reads of one step (0: not asked yet); the second
// read always follows the asking.
func (d *Drainer) readAt(ctx context.Context, k *keyState, seq uint64, last *uint64) (*queue.Msg, error) {
	m, err := d.q.Get(ctx, k.token, seq)
	if !errors.Is(err, queue.ErrEmpty) {
		return m, err
	}
	if *last == 0 {
		if *last, err = d.q.LastSeq(ctx); err != nil {
			return nil, err
		}
	}
	if seq > *last {
		return nil, fmt.Errorf("drain: job %d not readable yet: the queue's last is %d", seq, *last)
	}
	m, err = d.q.Get(ctx, k.token, seq)
	if d.debug && !errors.Is(err, queue.ErrEmpty) {
		d.log.Debug("drain: job found on the second read", "key", k.name, "seq", seq, "last", *last, "err", err)
	}
	return m, err
}
