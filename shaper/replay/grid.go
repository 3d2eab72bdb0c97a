package replay

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/shaper-dev/shaper/policies"
)

// Grid is the candidates a tuning replays: every combination of its
// outflows, queues and totals applied to a policy. An empty list keeps the
// policy's own value; a zero total Rate means no total cap.
type Grid struct {
	Outflows []policies.Rate
	Queues   []int
	Totals   []policies.Rate
	// Adapts are the adaptive outflows to try (the policy's adapt block; a
	// nil one is the fixed outflow). Empty keeps the policy's.
	Adapts []*policies.Adapt
}

// Candidates returns the policies of g applied to policy name of set,
// validated and with their defaults filled in as the policy file would,
// cheapest first (see Cheaper), without repeats; the policy itself is among
// them, at index current.
func (g Grid) Candidates(set *policies.Set, name string) (candidates []policies.Policy, current int, err error) {
	p, ok := set.Lookup(name)
	if !ok {
		return nil, 0, fmt.Errorf("replay: no policy %q", name)
	}
	outflows, queues, totals := g.Outflows, g.Queues, g.Totals
	if len(outflows) == 0 {
		outflows = []policies.Rate{p.Outflow}
	}
	if len(queues) == 0 {
		queues = []int{p.Queue}
	}
	if len(totals) == 0 {
		totals = []policies.Rate{p.Total}
	}
	adapts := g.Adapts
	if len(adapts) == 0 {
		adapts = []*policies.Adapt{p.Adapt}
	}
	candidates = []policies.Policy{p}
	for _, o := range outflows {
		for _, q := range queues {
			for _, t := range totals {
				for _, a := range adapts {
					c := p.Clone()
					c.Outflow, c.Queue, c.Total, c.Adapt = o, q, t, a
					checked, err := set.With(c)
					if err != nil {
						return nil, 0, fmt.Errorf("replay: candidate %s: %w", Describe(c), err)
					}
					c, _ = checked.Lookup(name)
					if !slices.ContainsFunc(candidates, func(x policies.Policy) bool { return same(x, c) }) {
						candidates = append(candidates, c)
					}
				}
			}
		}
	}
	slices.SortStableFunc(candidates, compareCost)
	current = slices.IndexFunc(candidates, func(x policies.Policy) bool { return same(x, p) })
	return candidates, current, nil
}

// same reports whether two candidates replay alike.
func same(a, b policies.Policy) bool {
	return compareCost(a, b) == 0 && a.Outflow.Interval() == b.Outflow.Interval() && a.Total.Interval() == b.Total.Interval() &&
		reflect.DeepEqual(a.Adapt, b.Adapt)
}

// Around returns n values spread around v by factors of two: v/2, v, 2v
// for n = 3; v/4 … 4v for n = 5 (at least 1, without repeats).
func Around(v, n int) []int {
	var out []int
	for i := -(n / 2); i <= n/2; i++ {
		x := v
		if i < 0 {
			x = v >> -i
		} else {
			x = v << i
		}
		x = max(x, 1)
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// RatesAround returns n rates spread around r by factors of two, as Around.
func RatesAround(r policies.Rate, n int) []policies.Rate {
	var out []policies.Rate
	for i := -(n / 2); i <= n/2; i++ {
		x := r
		if i < 0 {
			x.N /= float64(int(1) << -i)
		} else {
			x.N *= float64(int(1) << i)
		}
		out = append(out, x)
	}
	return out
}
