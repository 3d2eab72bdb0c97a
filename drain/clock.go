package drain

import "time"

// Clock is where a Drainer reads the time and gets its timers. The
// scheduler reads the time only through it, so a replay can run a Drainer
// on a virtual clock (see Advance); under testing/synctest the real clock
// is already virtual. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, after d. Only a started
	// Drainer (Start) uses timers; a driven one (Advance) does not.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock, with the semantics of
// time.Timer since Go 1.23: after Stop or Reset no stale time is received.
type Timer interface {
	// C returns the channel the timer's time is sent on when it fires.
	C() <-chan time.Time
	// Reset makes the timer fire after d instead.
	Reset(d time.Duration)
	// Stop keeps the timer from firing.
	Stop()
}

// realClock is the wall clock of the time package: the default Clock.
type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }
