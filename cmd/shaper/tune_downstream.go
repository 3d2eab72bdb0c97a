package main

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/drain/downstream"
	"github.com/shaper-dev/shaper/internal/suggest"
	"github.com/shaper-dev/shaper/policies"
)

// modelFrom returns the simulated downstream --downstream-capacity,
// --downstream-latency and --downstream-step describe, timing out at p's
// deliver.timeout; nil without --downstream-capacity.
func modelFrom(c *cli.Context, p policies.Policy) (*downstream.Config, error) {
	if !c.IsSet("downstream-capacity") {
		if c.IsSet("downstream-step") || c.IsSet("downstream-latency") {
			return nil, fmt.Errorf("--downstream-step and --downstream-latency need --downstream-capacity")
		}
		return nil, nil
	}
	capacity, err := policies.ParseRate(c.String("downstream-capacity"))
	if err != nil {
		return nil, fmt.Errorf("--downstream-capacity: %w", err)
	}
	m := &downstream.Config{Capacity: capacity.PerSecond(), Latency: c.Duration("downstream-latency"), Timeout: p.Deliver.Timeout}
	if m.Latency <= 0 {
		return nil, fmt.Errorf("--downstream-latency %v: want a positive duration", m.Latency)
	}
	var last time.Duration
	for _, s := range c.StringSlice("downstream-step") {
		at, rate, ok := strings.Cut(s, "=")
		d, err := time.ParseDuration(strings.TrimSpace(at))
		if !ok || err != nil || d <= last {
			return nil, fmt.Errorf("--downstream-step %q: want AT=RATE with AT a duration of trace time after the step before, e.g. 1m=20/s", s)
		}
		r, err := policies.ParseRate(rate)
		if err != nil {
			return nil, fmt.Errorf("--downstream-step %q: %w", s, err)
		}
		m.Phases = append(m.Phases, downstream.Phase{After: d, Capacity: r.PerSecond()})
		last = d
	}
	return m, nil
}

// adaptsFrom reads --adapt: off, key and policy, comma-separated, each an
// adapt block built on p's (its floor, latency and tolerance kept).
func adaptsFrom(list string, p policies.Policy) ([]*policies.Adapt, error) {
	var out []*policies.Adapt
	for _, s := range splitList(list) {
		switch per := policies.AdaptPer(s); per {
		case "off":
			out = append(out, nil)
		case policies.AdaptPerKey, policies.AdaptPerPolicy:
			a := policies.Adapt{Per: per}
			if p.Adapt != nil {
				a = *p.Adapt
				a.Per = per
			}
			out = append(out, &a)
		default:
			return nil, fmt.Errorf("--adapt: %q: want off, key or policy%s", s, suggest.Hint(s, []string{"off", string(policies.AdaptPerKey), string(policies.AdaptPerPolicy)}))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--adapt: want off, key or policy, comma-separated")
	}
	return out, nil
}

// adaptChange is the change of the adapt block that makes running want:
// none when they agree, off, or want's fields.
func adaptChange(want, running *policies.Adapt) policies.Field[policies.AdaptPatch] {
	switch {
	case reflect.DeepEqual(want, running):
		return policies.Field[policies.AdaptPatch]{}
	case want == nil:
		return policies.Value(policies.AdaptPatch{Off: true})
	}
	return policies.Value(policies.AdaptPatch{Per: policies.Value(want.Per), Floor: policies.Value(want.Floor),
		Latency: policies.Value(want.Latency), Tolerance: policies.Value(want.Tolerance)})
}
