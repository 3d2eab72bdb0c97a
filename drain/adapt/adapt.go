// Package adapt is the control law of an adaptive outflow: from what each
// delivery tells (its latency, a timeout, a failure, a downstream asking to
// be left alone) it sets the rate deliveries go at, between a floor and a
// ceiling that is never exceeded.
//
// # The law
//
// A Controller works in windows (Config.Window, and at least minSamples
// deliveries). At the end of each it compares the window's mean latency
// with a target: Config.Latency, or the learned baseline (the lowest
// window mean seen, which creeps up slowly so that a downstream that got
// slower for good is learnt) times Config.Tolerance. Then:
//
//   - Overload (a timeout, a 429/503, or failures in at least a tenth of
//     the window's deliveries): the rate drops to Backoff (0.7) of what was
//     offered. This is the safety net; the latency signal comes first.
//   - Congestion (mean latency above the target): the downstream's queue
//     grows while more is offered than it serves. With a fluid queue, its
//     delay grows by (offered − capacity)/capacity per second, so the
//     slope of latency over the window estimates the capacity:
//     capacity = offered / (1 + slope). The rate is set just under it, by
//     the share of the queue to drain within Config.Drain:
//     rate = capacity × (1 − excess delay / Drain). It never rises while
//     congested. A latency over the learned target that neither rises
//     nor falls, window after window, once the cuts took a quarter off
//     what was offered, is no queue (it would have drained): the
//     downstream got slower for good, and its latency becomes the
//     baseline at once.
//   - Clear: with a capacity learnt, a rate well under it returns half way
//     to it per window; near it, the rate probes up by a small gain
//     (Probe, 1 %) that doubles with every clear window (at most 16 %), as
//     TCP CUBIC leaves a plateau: quiet near the capacity last measured,
//     fast once it is clearly gone. A rate the key does not use (offered
//     under 90 % of it: too few jobs) is held, not raised.
//
// This is a delay-gradient law in the family of TCP Vegas and Netflix's
// Gradient2, with a direct capacity estimate instead of a multiplicative
// factor: it settles near the capacity from above in one or two windows
// without going through failures, where AIMD finds the capacity only by
// overrunning it (timeouts) and halves its rate each time.
//
// # Use
//
// A Controller is a plain state machine: no I/O, no clock, time passed in.
// It is not safe for concurrent use; the drain holds its lock around it.
package adapt

import (
	"fmt"
	"math"
	"time"
)

// Defaults of a zero Config.
const (
	DefaultTolerance = 1.5             // Config.Tolerance
	DefaultWindow    = time.Second     // Config.Window
	DefaultDrain     = 2 * time.Second // Config.Drain
	// DefaultFloorShare is the floor, as a share of the ceiling, when
	// Config.Floor is 0.
	DefaultFloorShare = 0.1
)

// Tuning of the law, fixed (see the package docs).
const (
	minSamples   = 5    // deliveries a window needs, unless it ran maxWindows
	holdWindows  = 3    // blind windows after a back-off before the next one
	maxWindows   = 10   // a window closes after this many Windows whatever its samples
	backoff      = 0.7  // rate kept of the offered one on overload
	probe        = 0.01 // the first probe's gain
	maxProbe     = 0.08 // the largest probe's gain
	creep        = 0.002
	failShare    = 0.1  // failures in this share of a window's deliveries are an overload
	used         = 0.9  // offered under this share of the rate: the rate is not used
	approach     = 0.5  // share of the way back to the capacity per clear window
	settle       = 0.97 // the rate returned to below a capacity learnt
	plateau      = 1.05 // probes stay small up to this much over the capacity learnt
	minSlope     = 0.02 // a latency rising slower (s/s) is not a queue: 2 % over the capacity
	significance = 3    // standard errors a rising slope must clear
	maxDrainCut  = 0.15 // the most a congested window sets the rate under the capacity
	maxFailCut   = 0.5  // the same, when deliveries also timed out or failed
	fallen       = 0.95 // a congested window's mean under this share of the one before: the queue drains
	flatWindows  = 2    // cut windows in a row whose latency neither rose nor fell, …
	flatCut      = 0.75 // … once the rate is under this share of where the cuts began: a slower downstream
)

// Config is how a Controller adapts. The zero value means the defaults.
type Config struct {
	// Floor is the lowest rate, per second. 0 means DefaultFloorShare of
	// the ceiling.
	Floor float64
	// Latency is the target latency of a delivery. 0 means the learned
	// baseline times Tolerance.
	Latency time.Duration
	// Tolerance is how many times the learned baseline a window's mean
	// latency may reach before it counts as congestion. 0 means
	// DefaultTolerance; it must be above 1.
	Tolerance float64
	// Window is how long the controller observes before it changes the
	// rate. 0 means DefaultWindow.
	Window time.Duration
	// Drain is how soon a congested downstream's queue is meant to empty.
	// 0 means DefaultDrain.
	Drain time.Duration
}

// Outcome is how one delivery ended.
type Outcome uint8

// Outcomes of a delivery.
const (
	Delivered Outcome = iota // accepted
	Failed                   // refused or errored (a 5xx, no route)
	TimedOut                 // no answer in time
	Throttled                // the downstream asked for a pause (429/503 with Retry-After)
)

var outcomeNames = [...]string{"delivered", "failed", "timed_out", "throttled"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Sample is one delivery observed.
type Sample struct {
	Start   time.Time     // when the delivery started
	Latency time.Duration // how long it took
	Outcome Outcome
}

// Controller is the adaptive rate of one key or one policy. Its zero
// value is not usable: make one with New.
type Controller struct {
	cfg     Config
	ceiling float64
	rate    float64

	baseline time.Duration // the lowest window mean latency, creeping up
	capacity float64       // the downstream's capacity last estimated (0: none)
	target   time.Duration // the latency target of the last window
	gain     float64       // the next probe's gain
	reason   Reason

	blind int    // windows in a row in which nothing was answered in time
	win   window // the window being observed

	// congested is the mean latency of the last window, when it was cut
	// for latency alone (0: it was not); flat counts such windows in a
	// row whose mean did not fall under fallen of the one before, and
	// cutFrom is the rate before the first of them.
	congested time.Duration
	flat      int
	cutFrom   float64
}

// New returns a Controller at its ceiling (per second), which it starts
// from: it acts as the fixed rate until deliveries tell otherwise.
func New(cfg Config, ceiling float64) *Controller {
	c := &Controller{cfg: cfg, gain: probe}
	c.SetCeiling(ceiling)
	c.rate = c.ceiling
	c.reason = Reason{Kind: AtCeiling}
	return c
}

// SetCeiling changes the ceiling; the rate is clamped to it at once. A
// rate at the old ceiling (nothing held it back) moves to the new one.
func (c *Controller) SetCeiling(ceiling float64) {
	atCeiling := c.rate >= c.ceiling
	c.ceiling = max(ceiling, 0)
	c.rate = c.clamp(c.rate)
	if atCeiling {
		c.rate = c.ceiling
	}
	if c.capacity > c.ceiling {
		c.capacity = 0
	}
}

// Rate returns the rate deliveries should go at, per second: between
// Floor and the ceiling.
func (c *Controller) Rate() float64 { return c.rate }

// Interval returns the time between deliveries at Rate.
func (c *Controller) Interval() time.Duration {
	if c.rate <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / c.rate)
}

// Status is a Controller's state, to show.
type Status struct {
	Rate     float64       `json:"rate"`        // per second
	Ceiling  float64       `json:"ceiling"`     // per second
	Floor    float64       `json:"floor"`       // per second
	Baseline time.Duration `json:"baseline_ns"` // the learned baseline latency (0: none yet)
	Capacity float64       `json:"capacity"`    // the downstream's capacity last estimated (0: none)
	Reason   Reason        `json:"reason"`      // why the rate is what it is
}

// Status returns the Controller's state.
func (c *Controller) Status() Status {
	return Status{Rate: c.rate, Ceiling: c.ceiling, Floor: c.floor(), Baseline: c.baseline, Capacity: c.capacity, Reason: c.reason}
}

func (c *Controller) floor() float64 {
	if c.cfg.Floor > 0 {
		return min(c.cfg.Floor, c.ceiling)
	}
	return c.ceiling * DefaultFloorShare
}

func (c *Controller) clamp(r float64) float64 {
	return min(max(r, c.floor()), c.ceiling)
}

func (c *Controller) window() time.Duration {
	if c.cfg.Window > 0 {
		return c.cfg.Window
	}
	return DefaultWindow
}

// Observe records one delivery and, when its window is complete, adapts
// the rate. It reports whether the rate changed.
func (c *Controller) Observe(s Sample) (changed bool) {
	w := &c.win
	if w.n == 0 {
		w.start = s.Start
	}
	w.add(s)
	elapsed := s.Start.Sub(w.start)
	if elapsed < c.window() || w.n < minSamples && elapsed < maxWindows*c.window() {
		return false
	}
	before := c.rate
	c.adapt(elapsed)
	*w = window{above: c.target}
	return c.rate != before
}

// adapt closes a window that lasted elapsed.
func (c *Controller) adapt(elapsed time.Duration) {
	w := &c.win
	// The rate offered: the starts span n−1 intervals of it.
	offered := float64(w.n-1) / elapsed.Seconds()
	seconds := elapsed.Round(time.Millisecond)
	overload := w.timeouts > 0 || w.throttled > 0 || float64(w.failures) >= failShare*float64(w.n)
	mean, ok := w.mean()
	if !ok {
		// Nothing answered in time: no latency to learn from. Back off
		// once, then hold while the downstream works off what it queued
		// before (the deliveries after a cut find it still there), and
		// back off again only after holdWindows such windows.
		c.reason = w.overloadReason(seconds)
		if c.blind++; c.blind == 1 || c.blind > holdWindows+1 {
			c.rate = c.clamp(min(c.rate, offered) * backoff)
			c.capacity, c.gain, c.blind = 0, probe, 1
		} else {
			// Say so: the rate shown was set before, not by this window.
			c.reason.Hold = holdWindows + 2 - c.blind
		}
		return
	}
	c.blind = 0
	if overload {
		c.blind = 1 // a cut: the blind windows right after it hold
	}
	switch {
	case c.baseline == 0 || mean < c.baseline:
		c.baseline = mean
	default:
		c.baseline = min(time.Duration(float64(c.baseline)*(1+creep))+1, mean)
	}
	target := c.targetOver(c.baseline)
	c.target = target
	congested, flat, cutFrom := c.congested, c.flat, c.cutFrom
	c.congested, c.flat, c.cutFrom = 0, 0, 0
	rising := w.all.rising()
	// Over the target for latency alone (no failures, not rising), and
	// the latency did not fall since the last such window.
	latencyOnly := !overload && !rising
	unmoved := latencyOnly && congested > 0 && float64(mean) >= fallen*float64(congested)
	switch {
	case c.cfg.Latency <= 0 && mean > target && unmoved && flat+1 >= flatWindows && c.rate <= flatCut*cutFrom:
		// Cut after cut, by a quarter now, the latency over the target
		// neither rose nor fell: a queue would have drained under the
		// cuts (a standing one at the capacity drains under the first
		// few). The downstream got slower for good (a longer service
		// time, not a fuller queue): its latency is the baseline now,
		// learnt at once rather than by the creep (minutes), and the
		// rate is held; clear windows then take it back up, and a real
		// queue shows as a rising latency.
		c.baseline = mean
		c.target = c.targetOver(mean)
		c.reason = Reason{Kind: Latency, Ratio: 1, Target: c.target}
	case overload || mean > target || rising:
		if latencyOnly {
			c.congested, c.cutFrom = mean, cutFrom
			if congested == 0 {
				c.cutFrom = min(c.rate, offered) // what was offered: a rate not used was no load
			}
			if unmoved {
				c.flat = flat + 1
			}
		}
		// The downstream queues: its capacity from the slope of the
		// latency of the deliveries answered, and a rate under it that
		// drains the queue within Drain.
		capacity := w.capacity(offered)
		slope, excess := w.all.slope(), w.all.at(elapsed.Seconds()) // the delay at the window's end
		drain := c.cfg.Drain
		if drain <= 0 {
			drain = DefaultDrain
		}
		maxCut := maxDrainCut
		if overload {
			maxCut = maxFailCut
		}
		// The delay to drain: over the baseline, or over the target when
		// one is set (a downstream slower than it goes to the floor).
		reference := c.baseline
		if c.cfg.Latency > 0 {
			reference = c.cfg.Latency
		}
		cut := min(max((excess-reference.Seconds())/drain.Seconds(), 0), maxCut)
		c.capacity = min(capacity, c.ceiling)
		c.rate = c.clamp(min(c.rate, capacity*(1-cut)))
		c.gain = probe
		c.reason = Reason{Kind: Latency, Ratio: float64(mean) / float64(max(c.baseline, 1)), Target: target}
		if overload {
			if slope <= 0 && mean <= target {
				// Failures without a queue: not the downstream's load
				// that latency shows; back off.
				c.rate = c.clamp(min(c.rate, offered) * backoff)
			}
			c.reason = w.overloadReason(seconds)
		}
	case offered < used*c.rate:
		c.reason = Reason{Kind: Unused}
	case c.capacity > 0 && c.rate < settle*settle*c.capacity:
		c.rate = c.clamp(c.rate + approach*(settle*c.capacity-c.rate))
		c.reason = Reason{Kind: Recovering, Capacity: c.capacity}
	default:
		c.rate = c.clamp(c.rate * (1 + c.gain))
		if c.capacity == 0 || c.rate > plateau*c.capacity {
			c.gain = min(c.gain*2, maxProbe) // past the capacity last seen: it grew
		}
		c.reason = Reason{Kind: Probing}
		if c.rate >= c.ceiling {
			c.reason = Reason{Kind: AtCeiling}
		}
	}
	if math.IsNaN(c.rate) {
		c.rate = c.floor()
	}
}

// targetOver is the latency target over baseline: Config.Latency, or
// baseline times the tolerance.
func (c *Controller) targetOver(baseline time.Duration) time.Duration {
	if c.cfg.Latency > 0 {
		return c.cfg.Latency
	}
	tol := c.cfg.Tolerance
	if tol <= 1 {
		tol = DefaultTolerance
	}
	return time.Duration(float64(baseline) * tol)
}

// SetConfig changes the configuration and the ceiling, keeping what the
// Controller learnt; the rate is clamped at once.
func (c *Controller) SetConfig(cfg Config, ceiling float64) {
	c.cfg = cfg
	c.SetCeiling(ceiling)
}
