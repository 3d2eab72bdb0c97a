package replay_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/replay"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

// result is a made-up replay of outflow (per second) and queue.
func result(t *testing.T, outflow float64, queue int, rejected float64, p99 time.Duration, peak int) replay.Result {
	t.Helper()
	p := policy(t, "  - {name: p, outflow: 1/s, queue: 1}\n")
	p.Outflow, p.Queue = policies.Rate{N: outflow, Per: time.Second}, queue
	return replay.Result{Policy: p, Submitted: 10_000, Rejected: uint64(rejected * 10_000), Wait: replay.Wait{P99: p99}, PeakTotal: peak}
}

func share(f float64) *float64 { return &f }

func TestChooseSeveralMeet(t *testing.T) {
	results := []replay.Result{
		result(t, 20, 50, 0.001, 2*time.Second, 100),  // meets
		result(t, 10, 200, 0.002, 4*time.Second, 80),  // meets
		result(t, 10, 100, 0.005, 3*time.Second, 80),  // meets: the cheapest
		result(t, 5, 100, 0.04, 6*time.Second, 50),    // too slow, too many rejected
		result(t, 10, 50, 0.03, 1*time.Second, 80),    // too many rejected
		result(t, 5, 400, 0.008, 12*time.Second, 50),  // waits too long
		result(t, 40, 100, 0.0001, time.Second, 2000), // meets, dearer
	}
	c := replay.Choose(results, replay.Targets{MaxWait: 5 * time.Second, MaxReject: share(0.01)})
	if c.Best != 2 {
		t.Fatalf("Choose picked %d (%s), want 2: the lowest outflow (10/s), then the smallest queue (100) that meets both targets; %s",
			c.Best, replay.Describe(results[max(c.Best, 0)].Policy), c.Reason)
	}
	// The cheaper candidates: outflow 5/s (both fail max-wait, one also
	// max-reject) and 10/s with queue 50 (fails max-reject).
	if c.Binding != replay.TargetMaxWait || !strings.Contains(c.Reason, "outflow 10/s, queue 100 is the cheapest") {
		t.Errorf("Binding %q, reason %q; want max-wait, which both cheaper outflows miss", c.Binding, c.Reason)
	}

	// With a downstream that takes 60/s, only outflow 5/s is comfortable,
	// and none of it meets the rest.
	c = replay.Choose(results, replay.Targets{MaxWait: 5 * time.Second, MaxReject: share(0.01), DownstreamMax: 60})
	if c.Best != -1 {
		t.Errorf("with downstream-max 60/s Choose picked %d, want none", c.Best)
	}

	// No targets: the cheapest candidate, nothing binds.
	c = replay.Choose(results, replay.Targets{})
	if c.Best != 3 || c.Binding != "" {
		t.Errorf("without targets: Best %d, Binding %q; want 3 (outflow 5/s, queue 100), none", c.Best, c.Binding)
	}
	// The cheapest of the grid meets them: nothing binds within it.
	c = replay.Choose(results, replay.Targets{MaxWait: time.Minute})
	if c.Best != 3 || c.Binding != "" || !strings.Contains(c.Reason, "none binds") {
		t.Errorf("loose targets: Best %d, Binding %q, %q; want 3, none binding", c.Best, c.Binding, c.Reason)
	}
}

func TestChooseNoneMeets(t *testing.T) {
	results := []replay.Result{
		result(t, 5, 100, 0.04, 6*time.Second, 50),
		result(t, 10, 50, 0.03, 3*time.Second, 80),
		result(t, 10, 200, 0.005, 8*time.Second, 80),
		result(t, 20, 100, 0.02, 4*time.Second, 100),
	}
	// No candidate rejects under 0.1 %: max-reject binds on its own.
	c := replay.Choose(results, replay.Targets{MaxWait: 10 * time.Second, MaxReject: share(0.001)})
	if c.Best != -1 || c.Binding != replay.TargetMaxReject || !strings.Contains(c.Reason, "the best, outflow 10/s, queue 200, has rejected 0.5%") {
		t.Errorf("Choose = %+v; want none, max-reject binding, naming the best candidate for it", c)
	}
	// Each target alone is met, never both: the one that stops more of
	// the candidates meeting the other binds (max-reject stops two that
	// wait at most 5 s, max-wait one that rejects at most 1 %).
	c = replay.Choose(results, replay.Targets{MaxWait: 5 * time.Second, MaxReject: share(0.01)})
	if c.Best != -1 || c.Binding != replay.TargetMaxReject || !strings.Contains(c.Reason, "of the candidates with p99 wait ≤ 5s, the best is outflow 20/s, queue 100 with rejected 2%") {
		t.Errorf("Choose = %+v; want none, max-reject binding", c)
	}
	// Without the candidates that wait little, max-wait is met by none.
	c = replay.Choose([]replay.Result{results[0], results[2]}, replay.Targets{MaxWait: 5 * time.Second, MaxReject: share(0.01)})
	if c.Best != -1 || c.Binding != replay.TargetMaxWait || !strings.Contains(c.Reason, "no candidate meets p99 wait ≤ 5s: the best, outflow 5/s, queue 100, has p99 wait 6s") {
		t.Errorf("Choose = %+v; want none, max-wait binding", c)
	}
	// A downstream no candidate is gentle enough for.
	c = replay.Choose(results, replay.Targets{DownstreamMax: 10})
	if c.Best != -1 || c.Binding != replay.TargetDownstreamMax || !strings.Contains(c.Reason, "peak 50/s") {
		t.Errorf("Choose = %+v; want none, downstream-max binding", c)
	}
}

// The whole way: a grid replayed in parallel, then chosen from.
func TestGridRecommends(t *testing.T) {
	set, err := policies.Parse("p.yaml", []byte("policies:\n  - {name: p, outflow: 4/s, queue: 20}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := replay.Grid{Outflows: replay.RatesAround(policies.Rate{N: 4, Per: time.Second}, 3), Queues: replay.Around(20, 3)}
	candidates, current, err := g.Candidates(set, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(candidates) != 9 || replay.Describe(candidates[current]) != "outflow 4/s, queue 20" || replay.Describe(candidates[0]) != "outflow 2/s, queue 10" {
		t.Fatalf("candidates %d, current %d (%s), first %s", len(candidates), current, replay.Describe(candidates[current]), replay.Describe(candidates[0]))
	}
	// 20 keys at 3/s each on average, in bursts.
	src := synthetic(t, traffic.Synth{Duration: 40 * time.Second, Rate: 40, Keys: 20, Seed: 5,
		Burst: traffic.Burst{Every: 10 * time.Second, For: 3 * time.Second, Rate: 150}})
	results, err := replay.RunAll(context.Background(), candidates, src, replay.Config{Parallel: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if r.Policy.Outflow != candidates[i].Outflow || r.Policy.Queue != candidates[i].Queue {
			t.Fatalf("result %d is of %s, want %s", i, replay.Describe(r.Policy), replay.Describe(candidates[i]))
		}
	}
	targets := replay.Targets{MaxWait: 4 * time.Second, MaxReject: share(0.05)}
	c := replay.Choose(results, targets)
	if c.Best < 0 {
		t.Fatalf("no candidate meets %+v: %s", targets, c.Reason)
	}
	for i := range results {
		if replay.Cheaper(results[i].Policy, results[c.Best].Policy) && targets.Meets(&results[i]) {
			t.Errorf("%s meets the targets and is cheaper than the recommended %s", replay.Describe(results[i].Policy), replay.Describe(results[c.Best].Policy))
		}
	}
	t.Logf("recommended: %s", c.Reason)
}

func TestGridRefusesBadCandidates(t *testing.T) {
	set, err := policies.Parse("p.yaml", []byte("policies:\n  - {name: p, outflow: 4/s, queue: 20}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := (replay.Grid{Queues: []int{0}}).Candidates(set, "p"); err == nil || !strings.Contains(err.Error(), "queue 0") {
		t.Errorf("a queue of 0: %v, want an error naming it", err)
	}
	if _, _, err := (replay.Grid{}).Candidates(set, "q"); err == nil {
		t.Errorf("an unknown policy: no error")
	}
	c, cur, err := (replay.Grid{Queues: []int{20, 20, 10}}).Candidates(set, "p")
	if err != nil || len(c) != 2 || cur != 1 {
		t.Errorf("repeated values: %d candidates, current %d, %v; want 2, 1", len(c), cur, err)
	}
}

// A larger queue is not replayed when a smaller one of the same outflow
// refused nothing, and what RunAll says of it is what replaying it finds;
// when the smaller queue refused jobs, the larger one is replayed.
func TestRunAllDerivesLargerQueues(t *testing.T) {
	set, err := policies.Parse("p.yaml", []byte("policies:\n  - {name: p, outflow: 10/s, queue: 4, overflow: reject}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := replay.Grid{Outflows: []policies.Rate{{N: 2, Per: time.Second}, {N: 10, Per: time.Second}}, Queues: []int{16, 32, 64}}
	candidates, _, err := g.Candidates(set, "p")
	if err != nil {
		t.Fatal(err)
	}
	// 10 keys at 4/s each on average: 10/s per key drains them, 2/s does not.
	src := synthetic(t, traffic.Synth{Duration: 30 * time.Second, Rate: 40, Keys: 10, Seed: 3})
	results, err := replay.RunAll(context.Background(), candidates, src, replay.Config{Parallel: 2, Series: true})
	if err != nil {
		t.Fatal(err)
	}
	derived := 0
	for i, r := range results {
		if r.Policy.Queue != candidates[i].Queue || r.Policy.Outflow != candidates[i].Outflow {
			t.Fatalf("result %d is of %s, want %s", i, replay.Describe(r.Policy), replay.Describe(candidates[i]))
		}
		alone, err := replay.Run(context.Background(), candidates[i], src, replay.Config{Series: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Derived {
			derived++
		}
		r.Derived, r.Series, alone.Series = false, nil, nil
		if !reflect.DeepEqual(r, alone) {
			t.Errorf("%s: RunAll says %+v, a replay of its own %+v", replay.Describe(candidates[i]), r, alone)
		}
		slow := candidates[i].Outflow.N == 2
		if slow && results[i].Derived || !slow && candidates[i].Queue > 16 && !results[i].Derived {
			t.Errorf("%s: derived %v, want it replayed at 2/s (the queues fill) and derived at 10/s above queue 16", replay.Describe(candidates[i]), results[i].Derived)
		}
	}
	if derived != 2 {
		t.Errorf("%d candidates derived, want 2 (queues 32 and 64 at 10/s)", derived)
	}
}
