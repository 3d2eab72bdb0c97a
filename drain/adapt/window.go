package adapt

import (
	"math"
	"time"
)

// window is what a Controller observed since its last change: every
// delivery counted, and the latency of those answered in time (delivered
// or refused, not timed out) against their start: all of them, and those
// above the last window's target (queued), whose slope measures the
// downstream's queue without the answers after it emptied.
type window struct {
	start                            time.Time
	n, failures, timeouts, throttled int
	all, queued                      fit
	above                            time.Duration // the latency over which an answer counts as queued
}

// fit is a least-squares fit of latency (y, seconds) over start (x,
// seconds after the window's start), with the first and last x and the
// deliveries counted up to them, for the rate offered meanwhile.
type fit struct {
	n                               int
	sumX, sumY, sumXX, sumXY, sumYY float64
	firstX, lastX                   float64
	firstN, lastN                   int
}

func (f *fit) add(x, y float64, counted int) {
	if f.n == 0 {
		f.firstX, f.firstN = x, counted
	}
	f.lastX, f.lastN = x, counted
	f.n++
	f.sumX += x
	f.sumY += y
	f.sumXX += x * x
	f.sumXY += x * y
	f.sumYY += y * y
}

// rising reports whether the fit's latency clearly rises: a slope above
// minSlope and above significance times its standard error, so that the
// jitter of a downstream's latency is not taken for a queue.
func (f *fit) rising() bool {
	slope := f.slope()
	if f.n < 8 || slope < minSlope {
		return false
	}
	n := float64(f.n)
	sxx := f.sumXX - f.sumX*f.sumX/n
	syy := f.sumYY - f.sumY*f.sumY/n
	sxy := f.sumXY - f.sumX*f.sumY/n
	residual := max(syy-slope*sxy, 0) / (n - 2)
	return slope > significance*math.Sqrt(residual/sxx)
}

// slope returns the slope of the fit, 0 with fewer than 3 points.
func (f *fit) slope() float64 {
	n := float64(f.n)
	if d := n*f.sumXX - f.sumX*f.sumX; f.n >= 3 && d > 0 {
		return (n*f.sumXY - f.sumX*f.sumY) / d
	}
	return 0
}

// at returns the fit's latency at x.
func (f *fit) at(x float64) float64 {
	n := float64(f.n)
	return f.sumY/n + f.slope()*(x-f.sumX/n)
}

// offered returns the rate offered while the fit's points started.
func (f *fit) offered() (float64, bool) {
	if f.n < 3 || f.lastX <= f.firstX {
		return 0, false
	}
	return float64(f.lastN-f.firstN) / (f.lastX - f.firstX), true
}

func (w *window) add(s Sample) {
	w.n++
	switch s.Outcome {
	case Failed:
		w.failures++
	case TimedOut:
		w.timeouts++
		return // its latency is only the caller's patience
	case Throttled:
		w.throttled++
		return // answered at once, without queueing
	}
	x := max(s.Start.Sub(w.start), 0).Seconds()
	w.all.add(x, s.Latency.Seconds(), w.n)
	if s.Latency > w.above {
		w.queued.add(x, s.Latency.Seconds(), w.n)
	}
}

// mean returns the mean latency of the deliveries answered in time.
func (w *window) mean() (time.Duration, bool) {
	if w.all.n == 0 {
		return 0, false
	}
	return time.Duration(w.all.sumY / float64(w.all.n) * float64(time.Second)), true
}

// capacity estimates the downstream's capacity from the window, which
// lasted elapsed, with offered the rate offered over it: with a fluid
// queue, its delay grows by (offered − capacity)/capacity per second.
func (w *window) capacity(offered float64) float64 {
	f := &w.queued
	if f.n < 3 {
		f = &w.all
	}
	if o, ok := f.offered(); ok {
		offered = o
	}
	return offered / (1 + max(f.slope(), -0.9))
}

// overloadReason says what overloaded the window.
func (w *window) overloadReason(elapsed time.Duration) Reason {
	switch {
	case w.throttled > 0:
		return Reason{Kind: Throttled429, Count: w.throttled, Of: w.n, Window: elapsed}
	case w.timeouts > 0:
		return Reason{Kind: Timeouts, Count: w.timeouts, Of: w.n, Window: elapsed}
	}
	return Reason{Kind: Failures, Count: w.failures, Of: w.n, Window: elapsed}
}
