package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/drain/adapt"
)

// An adaptive pace (Pace.Adapt): the configured interval or total cap is
// a ceiling, and the rate actually paced at is a controller's (package
// adapt), fed with every attempt's outcome. Everything that paces or
// answers about the pace — the slots (nextSlot), the schedule's answers
// (StartIn, RoomIn, Stored), the status — reads the effective interval
// through interval and total, so what the shaper tells producers is what
// the drain does.

// Scope says what an adaptive pace adapts.
type Scope uint8

// Scopes of Adapt.
const (
	// AdaptOff: no adaptation, the fixed pace.
	AdaptOff Scope = iota
	// AdaptKey: each key has its own rate under Pace.Interval, from its
	// own deliveries — for a downstream per key (per tenant): one key's
	// slow downstream does not slow the others.
	AdaptKey
	// AdaptPolicy: the total cap (Pace.Total) adapts, from the deliveries
	// of every key — for one downstream shared by every key. Without a
	// total cap it does nothing. With partitions (Group) each partition
	// adapts its share of the cap on its own.
	AdaptPolicy
)

var scopeNames = [...]string{"off", "key", "policy"}

func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// Adapt is an adaptive pace: Scope says what adapts, the embedded
// adapt.Config how (Floor is per second, of a key's rate or of the total).
// The zero Adapt is off.
type Adapt struct {
	Scope Scope
	adapt.Config
}

// adaptMemory is how long a key's controller is kept once the key has
// nothing left to do, so that a key that empties its queue for a moment
// does not forget what it learnt of its downstream.
const adaptMemory = 10 * time.Minute

// adaptive holds a Drainer's controllers. Guarded by the Drainer's mu.
type adaptive struct {
	policy *adapt.Controller         // AdaptPolicy
	keys   map[string]*keyController // AdaptKey, by key token
	pruned int                       // keys left at the last pruning
}

type keyController struct {
	c    *adapt.Controller
	used time.Time // its last delivery
}

// perSecond returns the rate of one delivery every interval.
func perSecond(interval time.Duration) float64 {
	if interval <= 0 {
		return 0
	}
	return float64(time.Second) / float64(interval)
}

// setAdapt applies d.pace's adaptation to the controllers: a new ceiling
// clamps their rates at once; a new scope starts afresh. d.mu must be held
// (or d not shared yet).
func (d *Drainer) setAdapt() {
	a := &d.adaptive
	p := d.pace
	if p.Adapt.Scope != AdaptPolicy || p.Total <= 0 {
		a.policy = nil
	} else if a.policy == nil {
		a.policy = adapt.New(p.Adapt.Config, perSecond(p.Total))
	} else {
		a.policy.SetConfig(p.Adapt.Config, perSecond(p.Total))
	}
	if p.Adapt.Scope != AdaptKey || p.Interval <= 0 {
		a.keys = nil
		return
	}
	for _, kc := range a.keys {
		kc.c.SetConfig(p.Adapt.Config, perSecond(p.Interval))
	}
}

// interval returns the effective interval of k's deliveries: its
// controller's with AdaptKey, else Pace.Interval. d.mu must be held.
func (d *Drainer) interval(k *keyState) time.Duration { return d.intervalOf(k.token) }

// intervalOf is interval by key token, for a key the Drainer may not hold.
func (d *Drainer) intervalOf(token string) time.Duration {
	if kc := d.adaptive.keys[token]; kc != nil {
		return max(kc.c.Interval(), d.pace.Interval)
	}
	return d.pace.Interval
}

// total returns the effective interval of the total cap: the policy's
// controller's with AdaptPolicy, else Pace.Total. d.mu must be held.
func (d *Drainer) total() time.Duration {
	if c := d.adaptive.policy; c != nil {
		return max(c.Interval(), d.pace.Total)
	}
	return d.pace.Total
}

// observe feeds an attempt of k, started at started and answered after
// took with err, to its controller. d.mu must be held.
func (d *Drainer) observe(k *keyState, started time.Time, took time.Duration, err error) {
	sample := adapt.Sample{Start: started, Latency: took, Outcome: outcome(err)}
	a := &d.adaptive
	if a.policy != nil {
		a.policy.Observe(sample)
	}
	if d.pace.Adapt.Scope != AdaptKey || d.pace.Interval <= 0 {
		return
	}
	kc := a.keys[k.token]
	if kc == nil {
		if a.keys == nil {
			a.keys = make(map[string]*keyController)
		}
		d.pruneAdapt(started)
		kc = &keyController{c: adapt.New(d.pace.Adapt.Config, perSecond(d.pace.Interval))}
		a.keys[k.token] = kc
	}
	kc.used = started
	kc.c.Observe(sample)
}

// pruneAdapt forgets the controllers of keys the Drainer no longer holds
// and that delivered nothing for adaptMemory, once the map doubled since
// it was last pruned. d.mu must be held.
func (d *Drainer) pruneAdapt(now time.Time) {
	a := &d.adaptive
	if len(a.keys) < max(1024, 2*a.pruned) {
		return
	}
	for token, kc := range a.keys {
		if d.keys[token] == nil && now.Sub(kc.used) > adaptMemory {
			delete(a.keys, token)
		}
	}
	a.pruned = len(a.keys)
}

// outcome classifies a sink's answer for the controller.
func outcome(err error) adapt.Outcome {
	var pause *RetryAfterError
	switch {
	case err == nil:
		return adapt.Delivered
	case errors.As(err, &pause):
		return adapt.Throttled
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return adapt.TimedOut
	}
	return adapt.Failed
}

// AdaptStatus returns the adaptive rate of the key with token token
// (AdaptKey), or of the policy when token is "" (AdaptPolicy), and false
// when that does not adapt or has not delivered yet.
func (d *Drainer) AdaptStatus(token string) (adapt.Status, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if token == "" {
		if c := d.adaptive.policy; c != nil {
			return c.Status(), true
		}
		return adapt.Status{}, false
	}
	if kc := d.adaptive.keys[token]; kc != nil {
		return kc.c.Status(), true
	}
	return adapt.Status{}, false
}
