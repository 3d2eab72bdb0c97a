package replay

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/policies"
)

// Targets are what an operator asks of a policy. The zero value asks
// nothing, and every candidate meets it.
type Targets struct {
	// MaxWait bounds the p99 time in queue. 0: no target.
	MaxWait time.Duration
	// MaxReject bounds the share of submissions rejected (0.01 is 1 %).
	// nil: no target.
	MaxReject *float64
	// DownstreamMax bounds the deliveries per second over all keys, as the
	// downstream can take them. In any one second the drain may start one
	// job more than a rate allows (its bound is ⌈T·rate⌉+1 in a window of
	// length T), so a candidate meets it with PeakTotal up to
	// ⌈DownstreamMax⌉+1. 0: no target.
	DownstreamMax float64
}

// The names of the targets, as Choice.Binding says them.
const (
	TargetMaxWait       = "max-wait"
	TargetMaxReject     = "max-reject"
	TargetDownstreamMax = "downstream-max"
)

// target is one of Targets, measured on a Result.
type target struct {
	name  string
	limit string                  // the target in words
	value func(r *Result) float64 // what is measured
	bound float64                 // the most value may be
	show  func(r *Result) string  // the measure in words
	fix   string                  // what moves it
}

func (t Targets) list() []target {
	var out []target
	if t.MaxWait > 0 {
		out = append(out, target{
			name: TargetMaxWait, limit: "p99 wait ≤ " + t.MaxWait.String(),
			value: func(r *Result) float64 { return float64(r.Wait.P99) }, bound: float64(t.MaxWait),
			show: func(r *Result) string { return "p99 wait " + roundDuration(r.Wait.P99).String() },
			fix:  "a higher outflow or a smaller queue",
		})
	}
	if t.MaxReject != nil {
		out = append(out, target{
			name: TargetMaxReject, limit: "rejected ≤ " + Percent(*t.MaxReject),
			value: func(r *Result) float64 { return r.RejectedShare() }, bound: *t.MaxReject + 1e-12,
			show: func(r *Result) string { return "rejected " + Percent(r.RejectedShare()) },
			fix:  "a higher outflow or a larger queue",
		})
	}
	if t.DownstreamMax > 0 {
		out = append(out, target{
			name: TargetDownstreamMax, limit: fmt.Sprintf("downstream ≤ %g/s", t.DownstreamMax),
			value: func(r *Result) float64 { return float64(r.PeakTotal) }, bound: math.Ceil(t.DownstreamMax) + 1,
			show: func(r *Result) string { return fmt.Sprintf("peak %d/s", r.PeakTotal) },
			fix:  "a lower outflow or a total cap",
		})
	}
	return out
}

// Meets reports whether r meets every target of t.
func (t Targets) Meets(r *Result) bool {
	for _, tg := range t.list() {
		if tg.value(r) > tg.bound {
			return false
		}
	}
	return true
}

// Choice is the recommendation among the results of a grid.
type Choice struct {
	// Best is the index of the recommended result: the cheapest that meets
	// every target (the lowest outflow, then the smallest queue, then the
	// lowest total cap). -1 when none meets them.
	Best int
	// Binding names the target that decides (TargetMaxWait, …): the one
	// the cheaper candidates fail, or, when none meets every target, the
	// one that cannot be met. "" when no target binds.
	Binding string
	// Reason says it in words.
	Reason string
}

// Cheaper reports whether a costs the downstream less than b: a lower
// outflow, then a smaller queue, then a lower total cap (none is the
// highest).
func Cheaper(a, b policies.Policy) bool { return compareCost(a, b) < 0 }

func compareCost(a, b policies.Policy) int {
	total := func(p policies.Policy) float64 {
		if p.Total.IsZero() {
			return math.Inf(1)
		}
		return p.Total.PerSecond()
	}
	return cmp.Or(
		cmp.Compare(a.Outflow.PerSecond(), b.Outflow.PerSecond()),
		cmp.Compare(a.Queue, b.Queue),
		cmp.Compare(total(a), total(b)),
	)
}

// Choose recommends, among results, the cheapest candidate that meets t,
// and says which target binds.
func Choose(results []Result, t Targets) Choice {
	order := make([]int, len(results))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return compareCost(results[a].Policy, results[b].Policy) })
	targets := t.list()
	fails := func(i int, tg target) bool { return tg.value(&results[i]) > tg.bound }
	for n, i := range order {
		if !t.Meets(&results[i]) {
			continue
		}
		return chosen(results, order[:n], i, targets, fails)
	}
	return noneMeets(results, order, targets, fails)
}

// chosen explains the choice of best over the cheaper candidates.
func chosen(results []Result, cheaper []int, best int, targets []target, fails func(int, target) bool) Choice {
	c := Choice{Best: best}
	name := DescribeAmong(results, results[best].Policy)
	if len(targets) == 0 {
		c.Reason = name + " is the cheapest candidate: no target was given"
		return c
	}
	if len(cheaper) == 0 {
		c.Reason = name + " is the cheapest candidate of the grid and meets every target: none binds here (a lower outflow or a smaller queue may meet them too)"
		return c
	}
	var binding target
	most, example := -1, -1
	for _, tg := range targets {
		n, last := 0, -1
		for _, i := range cheaper {
			if fails(i, tg) {
				n, last = n+1, i
			}
		}
		if n > most || n == most && tg.value(&results[best])/tg.bound > binding.value(&results[best])/binding.bound {
			binding, most, example = tg, n, last
		}
	}
	c.Binding = binding.name
	c.Reason = fmt.Sprintf("%s is the cheapest candidate that meets every target (%s); %s binds: %d of the %d cheaper candidates miss it, e.g. %s with %s",
		name, binding.show(&results[best]), binding.name, most, len(cheaper), DescribeAmong(results, results[example].Policy), binding.show(&results[example]))
	return c
}

// noneMeets explains why no candidate meets every target.
func noneMeets(results []Result, order []int, targets []target, fails func(int, target) bool) Choice {
	c := Choice{Best: -1}
	// A target no candidate meets binds on its own.
	for _, tg := range targets {
		best := -1
		for _, i := range order {
			if !fails(i, tg) {
				best = -2
				break
			}
			if best < 0 || tg.value(&results[i]) < tg.value(&results[best]) {
				best = i
			}
		}
		if best >= 0 {
			c.Binding = tg.name
			c.Reason = fmt.Sprintf("no candidate meets %s: the best, %s, has %s; try %s", tg.limit, DescribeAmong(results, results[best].Policy), tg.show(&results[best]), tg.fix)
			return c
		}
	}
	// Otherwise the targets conflict: the binding one is what stops most
	// of the candidates that meet all the others.
	var binding target
	most, example := 0, -1
	for _, tg := range targets {
		n, best := 0, -1
		for _, i := range order {
			if !fails(i, tg) || !meetsOthers(i, tg, targets, fails) {
				continue
			}
			n++
			if best < 0 || tg.value(&results[i]) < tg.value(&results[best]) {
				best = i
			}
		}
		if n > most {
			binding, most, example = tg, n, best
		}
	}
	if example < 0 {
		c.Binding = targets[0].name
		c.Reason = "no candidate meets every target: each misses two or more; try " + targets[0].fix
		return c
	}
	var others []string
	for _, tg := range targets {
		if tg.name != binding.name {
			others = append(others, tg.limit)
		}
	}
	c.Binding = binding.name
	c.Reason = fmt.Sprintf("no candidate meets every target: %s binds; of the candidates with %s, the best is %s with %s (want %s); try %s",
		binding.name, strings.Join(others, " and "), DescribeAmong(results, results[example].Policy), binding.show(&results[example]), binding.limit, binding.fix)
	return c
}

func meetsOthers(i int, except target, targets []target, fails func(int, target) bool) bool {
	for _, tg := range targets {
		if tg.name != except.name && fails(i, tg) {
			return false
		}
	}
	return true
}

// Percent formats a share as a percentage ("1.25%").
func Percent(share float64) string {
	s := fmt.Sprintf("%.2f", 100*share)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + "%"
}

// roundDuration rounds d for reading: to the millisecond under a minute,
// to the second above.
func roundDuration(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
