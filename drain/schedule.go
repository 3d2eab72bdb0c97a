package drain

import (
	"container/heap"
	"context"
	"time"
)

// schedule is the scheduler goroutine of a started Drainer: it hands due
// keys to the workers, and sleeps until the next key falls due or something
// changes.
func (d *Drainer) schedule(ctx context.Context) {
	timer := d.clock.NewTimer(time.Hour)
	defer timer.Stop()
	var steps []*step
	for {
		now := d.clock.Now()
		clear(steps)
		var next time.Time
		var ok bool
		// No more steps than the workers can take at once: a key stays in
		// the heap, in its place, until a worker is about to be free, so a
		// key that falls due meanwhile before it (a head just read, due
		// since its read fell due) goes first.
		steps, next, ok = d.due(now, steps[:0], d.cfg.Workers)
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
		wait := time.Hour
		if ok {
			wait = next.Sub(now)
		}
		timer.Reset(wait)
		select {
		case <-timer.C():
		case <-d.kick:
		case <-ctx.Done():
			return
		}
	}
}

// work is one worker goroutine of a started Drainer.
func (d *Drainer) work(ctx context.Context) {
	for {
		select {
		case s := <-d.tasks:
			d.runStep(ctx, s)
		case <-ctx.Done():
			return
		}
	}
}

// Advance drives the Drainer on the caller's goroutine: it runs every step
// due at now — deliveries, dead letters, reads, freed slots, with their
// callbacks — and returns when the Drainer next needs attention (ok false:
// not before a new job is stored, or never, when passive, draining or
// stopped). Steps are those a started Drainer would run, by the same
// scheduling code, one after another.
//
// Advance is for replays on a virtual clock: Config.Clock must read now
// while Advance runs (it stamps Event.Started and paces with it), and now
// must not go back. The first call starts the watch of the queue; with a
// MemQueue, the Drainer then learns of each job before Admit returns, so a
// replay is deterministic (with another Queue, Watch runs on a goroutine of
// its own and jobs are learnt of as it reports them). A driven Drainer
// that is passive counts the jobs stored but never reads the queue's
// depths: that resync runs only when started. Call it from one goroutine at a time, never from
// a callback, and not on a started Drainer (it does nothing there). ctx
// bounds the call: once it ends, no more steps start.
func (d *Drainer) Advance(ctx context.Context, now time.Time) (next time.Time, ok bool) {
	if !d.drive() {
		return time.Time{}, false
	}
	for ctx.Err() == nil {
		steps, next, ok := d.due(now, d.drivenSteps[:0], 0)
		d.drivenSteps = steps
		if len(steps) == 0 {
			return next, ok
		}
		for _, s := range steps {
			d.runStep(ctx, s)
		}
		clear(steps)
	}
	return d.nextDue()
}

// nextDue returns when the next key falls due, as due does.
func (d *Drainer) nextDue() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining || !d.active || d.stopped || d.heap.Len() == 0 {
		return time.Time{}, false
	}
	return d.heap[0].at.time(), true
}

// drive makes the Drainer a driven one on its first call, starting the
// watch of its queue, and says whether it is driven.
func (d *Drainer) drive() bool {
	d.mu.Lock()
	switch {
	case d.mode == modeDriven:
		d.mu.Unlock()
		return true
	case d.mode != modeNone || d.stopped:
		d.mu.Unlock()
		return false
	}
	d.mode = modeDriven
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.mu.Unlock()
	if w, ok := d.q.(syncWatcher); ok {
		w.watchNow(ctx, d.notice)
		return true
	}
	d.wg.Go(func() {
		if err := d.q.Watch(ctx, d.notice); err != nil {
			d.log.Error("drain: watch failed: no new keys will be drained", "err", err)
		}
	})
	return true
}

// due pops every key whose time has come, at most limit of them (0: no
// limit), turning each into a step appended to steps, and returns when the
// next key falls due (ok false: none is waiting; at or before now when
// the limit left keys due).
func (d *Drainer) due(now time.Time, steps []*step, limit int) (_ []*step, next time.Time, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining || !d.active || d.stopped || d.fenced(now) || d.fenced(d.clock.Now()) {
		// Past the lease's bound nothing starts (also when Advance is
		// given a time before the clock's): HoldUntil wakes the scheduler
		// when it moves. Another shaper may have taken the lease and
		// removed jobs kept from the watch: they are read again.
		d.watched.clear()
		return steps, time.Time{}, false
	}
	for d.heap.Len() > 0 && !d.heap[0].at.time().After(now) && (limit <= 0 || len(steps) < limit) {
		k := heap.Pop(&d.heap).(*keyState)
		if s := d.stepFor(k, now); s != nil {
			steps = append(steps, s)
		}
	}
	if d.heap.Len() == 0 {
		return steps, time.Time{}, false
	}
	return steps, d.heap[0].at.time(), true
}

// stepFor turns k, popped from the heap at now, into its step and marks k
// busy; or, when nothing of k is due after all, places k again and returns
// nil. A step dead-letters a job or attempts one (k.choose), frees slots,
// and reads the head.
func (d *Drainer) stepFor(k *keyState, now time.Time) *step {
	s := d.newStep(k)
	s.qctx, s.gen = d.calls.ctx, d.calls.gen
	k.retry = 0 // what is due is tried now; a failure marks it again
	if i, ok := k.deadDue(now); ok {
		t := k.job(i)
		s.deadLetter, s.job, s.reason, s.history = t.msg, i, t.deadReason, t.history
		if i == headJob {
			s.read, s.from = true, t.msg.Seq+1
		}
	} else if i, scheduled, deferred, ok := k.choose(now, d.pace.Retry.Budget >= 1); ok && !d.limited(k) {
		if total := d.total(); total > 0 {
			slot := scheduled // reserved under the cap already
			if !k.reserved {
				slot = maxTime(scheduled, d.totalNext)
				if slot.After(now) {
					// The total cap is the bottleneck: give the key the
					// next slot under it. Keys get slots in the order they
					// fell due.
					d.reserve(k, slot, total)
					d.putStep(k)
					d.place(k, now)
					return nil
				}
				d.totalNext = nextSlot(slot, now, total)
			}
			d.totalLast, d.totalLastAt = slot, now
		}
		k.reserved = false
		if deferred {
			d.retriesDeferred++
		}
		t := k.job(i)
		s.deliver, s.job, s.scheduled, s.chosen = t.msg, i, scheduled, now
		d.startFlying(k)
		if d.pace.Concurrency.flies() {
			s.flight = &flight{k: k, scheduled: scheduled}
		}
		if i == headJob {
			// The next head is read now, or, when the key's next slot is
			// far, shortly before it (readLater).
			s.from, s.readLater = t.msg.Seq+1, !k.seek && d.readsLate(k)
			s.read = !s.readLater
		}
	}
	if len(k.pend) > 0 && (s.deliver != nil || s.deadLetter != nil || !k.pendingAt.time().After(now)) {
		s.remove = append(s.remove, k.pend...)
	}
	s.readSince = now
	if readAt := d.headReadAt(k); k.fetch && !readAt.After(now) && k.head.msg == nil {
		s.read, s.from, s.seek, s.readSince = true, k.from, k.seek, readAt
		k.fetch, k.seek = false, false
	}
	if s.deliver == nil && s.deadLetter == nil && len(s.remove) == 0 && !s.read {
		d.putStep(k)
		d.place(k, now) // nothing due (only pacing lapsed)
		return nil
	}
	if s.read {
		d.planRead(k, s)
		if s.deliver == nil && s.deadLetter == nil {
			d.reserveForRead(k, now)
		}
	}
	k.busy = true
	d.inflight++
	return s
}

// reserveForRead gives k, whose first job is read now and whose own slot
// has come, the total cap's next slot at once, before the read comes back:
// keys take the cap's slots in the order they fell due, which is the order
// the answers to their producers count (roundsOf), not the order their
// reads happen to come back in. A read that finds no job gives the slot
// back (giveBack). d.mu must be held.
func (d *Drainer) reserveForRead(k *keyState, now time.Time) {
	total := d.total()
	if total <= 0 || k.reserved || k.head.msg != nil || k.failing() || k.next.time().After(now) {
		return
	}
	d.reserve(k, maxTime(now, d.totalNext), total)
}

// reserve gives k the slot under the total cap (of interval total) at
// slot, the cap's next: the next key's comes total later. d.mu must be
// held.
func (d *Drainer) reserve(k *keyState, slot time.Time, total time.Duration) {
	k.next, k.reserved = instantOf(slot), true
	d.totalNext = slot.Add(total)
}

// giveBack ends the slot k reserved under the total cap for a job it no
// longer has to attempt (its read found none), and frees the slot again
// when no key reserved one after it. d.mu must be held.
func (d *Drainer) giveBack(k *keyState) {
	if !k.reserved || k.head.msg != nil || k.failing() || k.fetch {
		return
	}
	k.reserved = false
	if total := d.total(); total > 0 && d.totalNext.Equal(k.next.time().Add(total)) {
		d.totalNext = k.next.time()
	}
}

// runStep runs s on the calling goroutine: its I/O and the callbacks of
// its outcome (run), its bookkeeping (complete), the report of a failure,
// and then it hands the key back to the scheduler (release). The key stays
// busy until then, so its next step cannot report before this one.
func (d *Drainer) runStep(ctx context.Context, s *step) {
	f := s.flight // s is the key's again once it is released
	d.run(ctx, s)
	if d.complete(s) {
		d.cfg.OnDeliver(*s.failure)
		d.mu.Lock()
		d.release(s.k, d.clock.Now())
		d.mu.Unlock()
	}
	if f != nil && f.taken {
		d.fly(ctx, f)
	}
}

// complete applies a finished step to its key's state. It releases the key
// unless a failure is left to report (then it returns true, and the caller
// reports it and releases the key).
func (d *Drainer) complete(s *step) (report bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	k := s.k
	retry := d.pace.Retry
	// A failed queue call is tried again after retryRead, or at once when
	// the queue answered again since the step began (outage.go).
	retryAt := now.Add(retryRead)
	if s.gen != d.calls.gen {
		retryAt = now
	} else if s.unavailable() {
		d.queueFailed(now)
	}
	if s.removeOK {
		if n := k.freed(len(s.remove)); n > 0 {
			d.queued -= int64(n)
			k.freedAt = instantOf(now)
		}
	} else if len(s.remove) > 0 {
		k.pendingAt, k.retry = instantOf(retryAt), k.retry|retryFree
	}
	switch {
	case s.fenced:
		// Not handed over: the job keeps its slot, and goes once the lease
		// is renewed.
	case s.held():
		// Not an attempt: the job goes in the key's slot once the slots
		// before it are freed.
		k.next, k.retry = instantOf(maxTime(k.next.time(), retryAt)), k.retry|retryHeld
	case s.flight != nil:
		d.takeOff(k, s.flight, s.job, now)
	case s.deliver != nil:
		t := k.job(s.job)
		if Attempted(s.err) {
			// Every attempt takes a slot of the key; retries use its budget.
			k.last, k.lastStart = instantOf(s.scheduled), instantOf(s.started)
			d.observe(k, s.started, s.took, s.err)
			k.next = instantOf(nextSlot(s.scheduled, s.started, d.interval(k)))
			if t.retrying {
				d.retries++
				k.spend()
			} else {
				k.earn(retry)
			}
		}
		if s.err == nil {
			k.delivered(s.job, holdEnd(s.started, k.next.time(), d.hold, d.pace.Interval))
			if s.readLater && (k.toRead() || k.lost()) {
				k.fetch, k.fetchAt = true, instantOf(now) // read at headReadAt
			}
		} else {
			d.failed(k, t, s, now)
		}
	}
	d.stepLanded(s, now)
	if s.deadLetter != nil && !s.fenced {
		if s.deadErr == nil {
			if k.buried(s.job) {
				d.queued--
				k.freedAt = instantOf(now)
			}
		} else {
			k.job(s.job).due, k.retry = retryAt, k.retry|retryDead
		}
	}
	k.forget(s.missing)
	if s.read {
		d.applyRead(k, s, now, retryAt)
	}
	if retry.stepsAside() {
		k.unblock(now)
	}
	if d.debug {
		d.log.Debug("drain: step", "key", k.name, "delivered", seqOf(s.deliver), "err", s.err,
			"dead_lettered", seqOf(s.deadLetter), "freed", s.remove, "free_ok", s.removeOK, "read", s.read, "exact", s.exact,
			"seek", s.seek, "head", seqOf(s.head), "read_err", s.readErr, "missing", s.missing, "held", seqOf(k.head.msg),
			"aside", len(k.aside), "fetch", k.fetch, "seqs", len(k.seqs), "pend", len(k.pend), "depth", k.depth)
	}
	d.tally(k)
	if s.failure != nil && d.cfg.OnDeliver != nil {
		return true
	}
	d.release(k, now)
	return false
}

// release ends k's step at now: k is no longer busy, and goes back in the
// heap at its next event. d.mu must be held.
func (d *Drainer) release(k *keyState, now time.Time) {
	k.busy = false
	d.putStep(k)
	d.takeBackAll(k, now)
	k.flight.blocked = false // looked at again: still at its limit, it waits again
	if k.wake && k.head.msg == nil {
		// A job was stored while the step ran, and the step did not read
		// the head (it only freed slots, say): read it now, or the key would
		// sleep with work until its next submission.
		k.wake = false
		if !k.fetch {
			k.fetch, k.fetchAt = true, instantOf(now)
		}
	}
	d.endInflight()
	d.place(k, now)
	d.wakeScheduler()
}

// place puts k in the heap at its next event, out of it when busy, and
// forgets a key that has nothing left to do once its pacing no longer
// matters at now. d.mu must be held.
func (d *Drainer) place(k *keyState, now time.Time) {
	if k.busy {
		d.heap.drop(k)
		return
	}
	if at, ok := k.nextEvent(d.headReadAt(k)); ok {
		d.heap.place(k, at)
		return
	}
	d.heap.drop(k)
	switch {
	case k.idle() && !now.Before(k.next.time()):
		d.forget(k)
	case k.idle():
		d.heap.place(k, k.next.time()) // look again when its pacing has lapsed
	}
}
