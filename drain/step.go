package drain

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// step is the I/O a worker does for one key at one time, in this order:
// deliver the held job, free the slots of jobs delivered before, read the
// new head.
type step struct {
	k         *keyState
	deliver   *queue.Msg
	bury      *queue.Msg // dead-letter this job instead of delivering it
	reason    string
	history   []string
	scheduled time.Time
	remove    []uint64
	read      bool
	from      uint64
	exact     []uint64 // read the head at the first of these sequences still stored
	subject   string

	// results
	started  time.Time
	err      error
	buryErr  error
	removeOK bool
	head     *queue.Msg
	readErr  error
	missing  []uint64 // exact sequences found gone
}

// schedule is the scheduler goroutine: it hands due keys to the workers.
func (d *Drainer) schedule(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		steps, wait := d.due(time.Now())
		for _, s := range steps {
			select {
			case d.tasks <- s:
			case <-ctx.Done():
				return
			}
		}
		if len(steps) > 0 {
			continue // time has passed while handing them out
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-d.kick:
		case <-ctx.Done():
			return
		}
	}
}

// due pops every key whose time has come, turning each into a step, and
// returns how long the scheduler may sleep after that.
func (d *Drainer) due(now time.Time) ([]*step, time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining || !d.active {
		return nil, time.Hour
	}
	var steps []*step
	for d.heap.Len() > 0 && !d.heap[0].at.After(now) {
		k := heap.Pop(&d.heap).(*keyState)
		s := &step{k: k}
		if k.held != nil && k.bury != "" && !k.due.After(now) {
			s.bury, s.reason, s.history = k.held, k.bury, k.history
			s.read, s.from = true, k.held.Seq+1
		} else if k.held != nil && !k.due.After(now) {
			if d.totalIv > 0 && !k.reserved {
				slot := maxTime(k.due, d.totalNext)
				if slot.After(now) {
					// The policy's total cap is the bottleneck: give the key the
					// next policy slot. Keys get slots in the order they fell due.
					k.due, k.reserved = slot, true
					d.totalNext = slot.Add(d.totalIv)
					d.place(k)
					continue
				}
				d.totalNext = nextSlot(slot, now, d.totalIv)
			}
			k.reserved = false
			s.deliver, s.scheduled = k.held, k.due
			s.subject = d.pol.DeliverSubject() + "." + k.token
			s.read, s.from = true, k.held.Seq+1
		}
		if len(k.pend) > 0 && (s.deliver != nil || s.bury != nil || !k.pendingAt.After(now)) {
			s.remove = append([]uint64(nil), k.pend...)
		}
		if k.fetch && !k.fetchAt.After(now) && k.held == nil {
			s.read, s.from = true, k.from
			k.fetch = false
		}
		if s.deliver == nil && s.bury == nil && s.remove == nil && !s.read {
			d.place(k) // nothing due (draining, or only pacing lapsed)
			continue
		}
		if s.read {
			d.planRead(k, s)
		}
		k.busy = true
		d.inflight++
		steps = append(steps, s)
	}
	wait := time.Hour
	if d.heap.Len() > 0 {
		wait = d.heap[0].at.Sub(now)
	}
	return steps, wait
}

// work is one worker goroutine.
func (d *Drainer) work(ctx context.Context) {
	for {
		select {
		case s := <-d.tasks:
			d.run(ctx, s)
			d.complete(s)
		case <-ctx.Done():
			return
		}
	}
}

func (d *Drainer) run(ctx context.Context, s *step) {
	if s.deliver != nil {
		s.started = time.Now()
		s.err = d.sink.Deliver(ctx, &Delivery{Policy: d.q.Policy(), Subject: s.subject, Msg: s.deliver})
		if s.err == nil && d.cfg.OnDeliver != nil {
			d.cfg.OnDeliver(Event{Key: s.deliver.Key, ID: s.deliver.ID, Attempt: s.deliver.Attempt,
				Scheduled: s.scheduled, Started: s.started})
		}
		if s.err != nil {
			s.read = false
		}
	}
	if s.bury != nil {
		s.buryErr = d.cfg.DeadLetter(ctx, s.bury, s.reason, s.history)
		if s.buryErr == nil {
			s.buryErr = d.q.Remove(ctx, s.bury.Seq)
		}
		if s.buryErr != nil {
			s.read = false
			d.log.Warn("drain: dead-letter", "key", s.k.name, "job", s.bury.ID, "reason", s.reason, "err", s.buryErr)
		} else if d.cfg.OnDeliver != nil {
			d.cfg.OnDeliver(Event{Key: s.bury.Key, ID: s.bury.ID, Attempt: s.bury.Attempt, Reason: s.reason, Started: time.Now()})
		}
	}
	if len(s.remove) > 0 {
		s.removeOK = true
		for _, seq := range s.remove {
			if err := d.q.Remove(ctx, seq); err != nil {
				s.removeOK = false
				d.log.Warn("drain: free slot", "key", s.k.name, "seq", seq, "err", err)
				break
			}
		}
	}
	if s.read {
		var last uint64 // the stream's last sequence, asked at most once a step
		for _, seq := range s.exact {
			s.head, s.readErr = d.readAt(ctx, s.k, seq, &last)
			if !errors.Is(s.readErr, queue.ErrEmpty) {
				break
			}
			s.missing = append(s.missing, seq)
		}
		if s.head == nil && s.readErr == nil {
			s.readErr = queue.ErrEmpty
		}
	}
}

// readAt reads k's job at seq. It answers ErrEmpty only for a job gone for
// good (removed by the drainer this one took over from): a job not found is
// gone only when the stream leader has stored past it and a second read
// still misses it, since in a cluster the server running the watch can
// store a job before the leader that answers reads does (seen: a job
// skipped, and left queued, in a steady R3 cluster). *last caches the
// leader's last sequence across the reads of one step (0: not asked yet);
// the second read always follows the asking.
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
		return nil, fmt.Errorf("drain: job %d not readable yet: the stream leader is at %d", seq, *last)
	}
	m, err = d.q.Get(ctx, k.token, seq)
	if d.debug && !errors.Is(err, queue.ErrEmpty) {
		d.log.Debug("drain: job found on the second read", "key", k.name, "seq", seq, "last", *last, "err", err)
	}
	return m, err
}

// planRead decides where s reads k's head: at the sequences Watch reported
// for the key, one index lookup each, never a search of the key's subject
// (which would scan every job stored after s.from, of all keys). A job found
// gone was removed by another drainer before this one took over: skipped.
func (d *Drainer) planRead(k *keyState, s *step) {
	i := 0
	for i < len(k.seqs) && k.seqs[i] < s.from {
		i++
	}
	k.seqs = k.seqs[i:]
	s.exact = append([]uint64(nil), k.seqs[:min(len(k.seqs), 4)]...)
}

// complete applies a finished step to its key's state.
func (d *Drainer) complete(s *step) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	k := s.k
	k.busy = false
	if s.removeOK {
		for _, seq := range s.remove {
			d.removed(k, seq)
		}
		k.pend = k.pend[len(s.remove):]
	} else if len(s.remove) > 0 {
		k.pendingAt = now.Add(retryRead)
	}
	if s.deliver != nil {
		if s.err == nil {
			d.delivered.Add(1)
			k.fails, k.history = 0, nil
			k.held = nil
			k.next = nextSlot(s.scheduled, s.started, d.interval)
			k.from = s.deliver.Seq + 1
			k.pend = append(k.pend, s.deliver.Seq)
			k.pendingAt = s.started.Add(d.hold)
		} else {
			d.failed(k, s, now)
		}
	}
	if s.bury != nil {
		if s.buryErr == nil {
			k.held, k.bury, k.fails, k.history = nil, "", 0, nil
			k.from = s.bury.Seq + 1
			d.removed(k, s.bury.Seq)
			d.dead.Add(1)
		} else {
			k.due = now.Add(retryRead)
		}
	}
	if len(s.missing) > 0 {
		k.seqs = slices.DeleteFunc(k.seqs, func(q uint64) bool { return slices.Contains(s.missing, q) })
	}
	if s.read {
		switch {
		case s.head != nil:
			k.held = s.head
			k.due = k.next
			if k.next.Before(now.Add(-d.interval)) {
				k.due = now // the key was idle: its pacing has lapsed
			}
			k.wake = false
		case errors.Is(s.readErr, queue.ErrEmpty):
			if len(k.seqs) > 0 {
				k.wake = true // reported jobs left to try
			}
			if k.wake {
				k.wake = false
				k.fetch, k.fetchAt = true, now
			}
		default:
			d.log.Warn("drain: read head", "key", k.name, "err", s.readErr)
			k.fetch, k.fetchAt = true, now.Add(retryRead)
		}
	}
	if k.wake && k.held == nil {
		// A job was stored while this step ran, and the step did not read
		// the head (it only freed slots, say): read it now, or the key would
		// sleep with work until its next submission.
		k.wake = false
		if !k.fetch {
			k.fetch, k.fetchAt = true, now
		}
	}
	if d.debug {
		d.log.Debug("drain: step", "key", k.name, "delivered", seqOf(s.deliver), "err", s.err,
			"buried", seqOf(s.bury), "freed", s.remove, "free_ok", s.removeOK, "read", s.read, "exact", s.exact,
			"head", seqOf(s.head), "read_err", s.readErr, "missing", s.missing, "held", seqOf(k.held),
			"fetch", k.fetch, "seqs", len(k.seqs), "pend", len(k.pend), "depth", k.depth)
	}
	d.inflight--
	if d.draining && d.inflight == 0 {
		select {
		case <-d.idle:
		default:
			close(d.idle)
		}
	}
	d.place(k)
	d.wakeScheduler()
}

// failed applies a failed delivery of k's held job: it decides whether the
// failure counts, when to try again, and whether to give up.
func (d *Drainer) failed(k *keyState, s *step, now time.Time) {
	d.failedN.Add(1)
	var (
		ra     *RetryAfterError
		gu     *GiveUpError
		wait   time.Duration
		counts = true
	)
	switch {
	case errors.As(s.err, &gu):
		k.bury = gu.Reason
	case errors.As(s.err, &ra) && ra.NotAttempted:
		wait, counts = ra.After, false
	case errors.As(s.err, &ra) && !d.cfg.CountPauses:
		wait, counts = ra.After, false
		k.held.Attempt++
	default:
		k.held.Attempt++
		wait = d.retryWait(k.fails + 1)
		if ra != nil {
			wait = min(max(wait, ra.After), max(d.pol.Retry.MaxBackoff, d.pol.Retry.Backoff))
		}
	}
	if counts && k.bury == "" {
		k.fails++
		if n := d.pol.Retry.Attempts; n > 0 && k.fails >= n && d.cfg.DeadLetter != nil {
			k.bury = d.cfg.FailReason
		}
	}
	if dl := d.pol.Retry.Deadline; dl > 0 && k.bury == "" && d.cfg.DeadLetter != nil {
		end := k.held.EnqueuedAt.Add(dl)
		if !now.Before(end) {
			k.bury = ReasonDeadline
		} else if now.Add(wait).After(end) {
			wait = end.Sub(now) // look again when the deadline passes
		}
	}
	if k.bury != "" {
		wait = 0
		if d.cfg.DeadLetter == nil {
			k.bury = "" // nowhere to put it: keep retrying
			wait = d.retryWait(k.fails)
		}
	}
	k.due = now.Add(wait)
	if ra != nil && ra.NotAttempted {
		// Waiting for room is not an attempt; say once that it waited.
		if n := len(k.history); n == 0 || !strings.Contains(k.history[n-1], " waiting: ") {
			k.history = append(k.history, fmt.Sprintf("%s waiting: %s", s.started.UTC().Format(time.RFC3339Nano), ra.Cause))
		}
	} else {
		k.history = append(k.history, fmt.Sprintf("%s attempt %d: %v", s.started.UTC().Format(time.RFC3339Nano), k.held.Attempt-1, s.err))
		if len(k.history) > maxHistory {
			k.history = k.history[len(k.history)-maxHistory:]
		}
		d.log.Warn("drain: delivery failed", "key", k.name, "job", k.held.ID, "failures", k.fails, "retry_in", wait, "err", s.err)
	}
	// Reported under the lock on purpose: a job's dead letter (its next
	// step, possibly at once on another worker) must not overtake the
	// report of the failure before it.
	if d.cfg.OnDeliver != nil {
		d.cfg.OnDeliver(Event{Key: k.held.Key, ID: k.held.ID, Attempt: k.held.Attempt, Scheduled: s.scheduled,
			Started: s.started, Err: s.err, RetryAt: k.due})
	}
}

// maxHistory bounds the attempts a dead letter recounts.
const maxHistory = 32
