package drain

import "time"

// The drain lease's fence: a Drainer delivers only before the end of the
// lease it holds, as its own clock reads it.

// HoldUntil bounds when deliveries may start: only before until, the end
// of the drain lease this Drainer delivers under as its holder's clock
// reads it (Config.Clock's time: with the default clock, a monotonic
// reading of time.Now). The lease's holder moves the bound on with every
// renewal. Every delivery checks it right before the sink is called, and
// the scheduler starts no step at all past it: a holder that was frozen
// past its lease (a stopped process, a long GC pause, a stalled VM) wakes
// up delivering nothing until it has renewed, or been told by SetActive
// that it lost the lease. The zero time, the default, means no bound.
func (d *Drainer) HoldUntil(until time.Time) {
	if until.IsZero() {
		d.fence.Store(nil)
	} else {
		d.fence.Store(&until)
	}
	d.wakeScheduler()
}

// fenced reports whether deliveries may not start at now: the bound of
// HoldUntil has passed.
func (d *Drainer) fenced(now time.Time) bool {
	until := d.fence.Load()
	return until != nil && !now.Before(*until)
}
