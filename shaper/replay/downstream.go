package replay

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/drain/downstream"
)

// Downstream is what a replay delivers to: the consumers of the policy's
// jobs, as far as the replay models them. The zero value takes every
// delivery at once.
type Downstream struct {
	// Down lists the windows of trace time during which every delivery
	// fails, as a consumer answering with an error does: each is a failed
	// attempt, retried under the policy's retry settings, or dead-lettered.
	Down []Window
	// Model, when set, is a simulated downstream (package
	// drain/downstream) that takes the deliveries Down lets through: a
	// capacity that may change over the trace, a latency that grows when
	// more is offered than it serves, timeouts. An adaptive outflow (the
	// policy's adapt block) adapts to it as to a real one. Each replay
	// runs its own, from the trace's start.
	Model *downstream.Config
}

// String describes the model: "serves 50/s, 20/s from 1m0s; latency
// 20ms, timeout 10s".
func (d *Downstream) String() string {
	m := d.Model
	if m == nil {
		return ""
	}
	s := fmt.Sprintf("serves %g/s", m.Capacity)
	for _, p := range m.Phases {
		s += fmt.Sprintf(", %g/s from %v", p.Capacity, p.After)
	}
	return s + fmt.Sprintf("; latency %v, timeout %v", m.Latency, m.Timeout)
}

// Window is a span of trace time, from From (included) to To (excluded),
// both counted from the trace's start.
type Window struct {
	From, To time.Duration
}

// String returns the window as ParseWindow reads it ("0s-10s").
func (w Window) String() string { return w.From.String() + "-" + w.To.String() }

// ParseWindow reads a window of trace time written FROM-TO, two durations
// such as 0s-10s or 1m30s-2m: FROM at least 0, TO after FROM.
func ParseWindow(s string) (Window, error) {
	bad := func(why string) (Window, error) {
		return Window{}, fmt.Errorf("%q: %s; want FROM-TO, two durations from the trace's start such as 0s-10s", s, why)
	}
	from, to, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok || from == "" || to == "" {
		return bad("not a window")
	}
	var w Window
	var err error
	if w.From, err = time.ParseDuration(strings.TrimSpace(from)); err != nil {
		return bad("FROM is not a duration")
	}
	if w.To, err = time.ParseDuration(strings.TrimSpace(to)); err != nil {
		return bad("TO is not a duration")
	}
	if w.From < 0 || w.To <= w.From {
		return bad("TO must come after FROM")
	}
	return w, nil
}

// errDown is the replay's sink's answer to a delivery while the downstream
// is down: a failed attempt, as drain.NATSSink reports a consumer's error.
var errDown = fmt.Errorf("%w: the downstream is down (replay)", drain.ErrDelivery)

// deliver returns what the downstream answers a delivery at trace time at:
// nil when it takes it.
func (d *Downstream) deliver(at time.Duration) error {
	for _, w := range d.Down {
		if at >= w.From && at < w.To {
			return errDown
		}
	}
	return nil
}

// check reports a window or a model no replay can use.
func (d *Downstream) check() error {
	if d.Model != nil {
		if _, err := downstream.New(&clock{}, *d.Model); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	for _, w := range d.Down {
		if w.From < 0 || w.To <= w.From {
			return errors.New("replay: downstream: window " + w.String() + " is empty or starts before the trace")
		}
	}
	return nil
}
