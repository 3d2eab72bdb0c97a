package drain_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/drain/downstream"
	"github.com/shaper-dev/shaper/queue"
)

// Adaptive outflow through a real Drainer, driven on a virtual clock
// against a simulated downstream (package downstream).

// attempt is one delivery a stepRig's sink saw.
type attempt struct {
	key   string
	start time.Duration
	took  time.Duration
	err   error
}

// stepRig is a MemQueue kept full for its keys, a driven Drainer, and a
// simulated downstream per key (or one for all).
type stepRig struct {
	clock *virtualClock // nil when started on the real (or synctest's) clock
	now   func() time.Time
	t0    time.Time
	q     *drain.MemQueue
	d     *drain.Drainer
	sinks map[string]*downstream.Downstream // by key; "" for every key

	mu       sync.Mutex
	attempts []attempt
	admitted int
}

func newStepRig(tb testing.TB, pace drain.Pace, sinks map[string]downstream.Config) *stepRig {
	tb.Helper()
	r := &stepRig{clock: &virtualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, sinks: map[string]*downstream.Downstream{}}
	r.t0, r.now = r.clock.Now(), r.clock.Now
	for key, cfg := range sinks {
		ds, err := downstream.New(r.clock, cfg)
		if err != nil {
			tb.Fatal(err)
		}
		r.sinks[key] = ds
	}
	var err error
	if r.q, err = drain.NewMemQueue("p", 1000, drain.MemQueueConfig{Clock: r.clock}); err != nil {
		tb.Fatal(err)
	}
	r.d = drain.New(r.q, r, pace, drain.Config{Clock: r.clock, Jitter: func() float64 { return 0.5 }})
	tb.Cleanup(r.d.Stop)
	r.d.Advance(context.Background(), r.t0)
	return r
}

// Deliver routes a delivery to its key's downstream and records it.
func (r *stepRig) Deliver(ctx context.Context, d *drain.Delivery) error {
	ds := r.sinks[d.Msg.Key]
	if ds == nil {
		ds = r.sinks[""]
	}
	err := ds.Deliver(ctx, d)
	r.mu.Lock()
	r.attempts = append(r.attempts, attempt{key: d.Msg.Key, start: r.now().Sub(r.t0), took: d.Took, err: err})
	r.mu.Unlock()
	return err
}

// run keeps every key in keys backlogged (topped up to depth jobs every
// 100 ms) and calls sample every 100 ms, until end.
func (r *stepRig) run(tb testing.TB, keys []string, depth int, end time.Duration, sample func(at time.Duration)) {
	tb.Helper()
	ctx := context.Background()
	for at := time.Duration(0); at <= end; at += 100 * time.Millisecond {
		now := r.t0.Add(at)
		r.topUp(tb, keys, depth, now)
		for {
			next, ok := r.d.Advance(ctx, r.clock.Now())
			if !ok || next.After(now) {
				break
			}
			r.clock.set(next)
		}
		r.clock.set(now)
		if sample != nil {
			sample(at)
		}
	}
}

// topUp stores jobs for each of keys until it has depth.
func (r *stepRig) topUp(tb testing.TB, keys []string, depth int, now time.Time) {
	tb.Helper()
	for _, key := range keys {
		token, _ := queue.EncodeKey(key)
		for n := r.d.Key(token, now).Queued; n < int64(depth); n++ {
			r.admitted++
			if _, err := r.q.Admit(context.Background(), queue.Job{ID: fmt.Sprintf("%s-%d", key, r.admitted), Key: key}); err != nil {
				tb.Fatalf("Admit = %v", err)
			}
		}
	}
}

// rate returns the effective rate of c's drainer d now: the policy's, or
// its one key's, or the ceiling when neither adapts.
func (c stepCase) rate(d *drain.Drainer) float64 {
	if st, ok := d.AdaptStatus(""); ok {
		return st.Rate
	}
	if len(c.keys) == 1 {
		return rateOf(d, c.keys[0], c.ceiling)
	}
	return c.ceiling
}

// phaseFigures are what a key did in one phase of constant capacity.
type phaseFigures struct {
	capacity float64
	settle   time.Duration // from the phase's start until the rate stayed within 10 % of the capacity (-1: never)
	low, hi  float64       // the effective rate's range once settled, per second
	attempts int           // once settled
	failed   int           // once settled
	latency  time.Duration // the mean latency once settled
	maxIn1s  int           // most deliveries started in any 1 s window of the phase
}

func (f phaseFigures) String() string {
	return fmt.Sprintf("capacity %4.0f/s: within 10 %% after %5v, then rate %.1f–%.1f/s (%+.1f %% … %+.1f %%), failed %d of %d (%.2f %%), latency %v, most in 1 s %d",
		f.capacity, f.settle, f.low, f.hi, 100*(f.low/f.capacity-1), 100*(f.hi/f.capacity-1), f.failed, f.attempts,
		100*float64(f.failed)/float64(max(f.attempts, 1)), f.latency.Round(time.Millisecond), f.maxIn1s)
}

// figures measures key's phases [from, to) from the rates sampled every
// 100 ms (rates[i] at i×100 ms) and the attempts recorded.
func (r *stepRig) figures(keys []string, rates []float64, from, to time.Duration, capacity float64) phaseFigures {
	f := phaseFigures{capacity: capacity, settle: -1}
	i0, i1 := int(from/(100*time.Millisecond)), int(to/(100*time.Millisecond))
	i1 = min(i1, len(rates))
	settled := i1
	if rates == nil {
		settled = i0 // no rates: every attempt of the phase counts
	}
	for i := i1 - 1; i >= i0; i-- {
		if rates[i] < 0.9*capacity || rates[i] > 1.1*capacity {
			break
		}
		settled = i
	}
	if rates != nil && settled < i1 {
		f.settle = time.Duration(settled-i0) * 100 * time.Millisecond
		f.low, f.hi = rates[settled], rates[settled]
		for _, x := range rates[settled:i1] {
			f.low, f.hi = min(f.low, x), max(f.hi, x)
		}
	}
	steady := time.Duration(settled) * 100 * time.Millisecond
	var starts []time.Duration
	for _, a := range r.attempts {
		if !slices.Contains(keys, a.key) || a.start < from || a.start >= to {
			continue
		}
		starts = append(starts, a.start)
		if a.start >= steady {
			f.latency += a.took
			f.attempts++
			if a.err != nil {
				f.failed++
			}
		}
	}
	f.latency /= time.Duration(max(f.attempts, 1))
	for i, j := 0, 0; i < len(starts); i++ {
		for starts[i]-starts[j] >= time.Second {
			j++
		}
		f.maxIn1s = max(f.maxIn1s, i-j+1)
	}
	return f
}

// rate returns the effective rate of key (AdaptKey) now, or the ceiling.
func rateOf(d *drain.Drainer, key string, ceiling float64) float64 {
	token, _ := queue.EncodeKey(key)
	if st, ok := d.AdaptStatus(token); ok {
		return st.Rate
	}
	return ceiling
}

// stepCase is a step test's setting: the downstream, the keys kept
// backlogged and the pace.
type stepCase struct {
	name    string
	ds      downstream.Config
	keys    []string
	pace    drain.Pace
	ceiling float64 // of the rate adapted, per second
}

// The step test of the adaptive outflow: a downstream whose capacity goes
// 50/s → 20/s → 50/s, under a 50/s ceiling, beside a fixed 50/s pace on
// the same downstream; per key (one key, its outflow adapts) and per
// policy (ten keys at 10/s each under a total cap that adapts). The
// effective rate comes within 10 % of the capacity within 30 s of each
// step and stays there, failures at steady state stay under 1 %, and no
// 1 s window has more than the ceiling's 50 deliveries (+1: a window may
// catch both ends of the slot grid).
func TestAdaptStep(t *testing.T) {
	const phase = 60 * time.Second
	capacities := []float64{50, 20, 50}
	retry := drain.Retry{Backoff: time.Second, MaxBackoff: 10 * time.Second, Budget: 0.2}
	var cases []stepCase
	for _, latency := range []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
		for _, jitter := range []float64{0, 0.5} {
			ds := downstream.Config{Capacity: capacities[0], Latency: latency, Jitter: jitter, Seed: 1, Timeout: time.Second,
				Phases: []downstream.Phase{{After: phase, Capacity: capacities[1]}, {After: 2 * phase, Capacity: capacities[2]}}}
			name := fmt.Sprintf("latency %v jitter %v", latency, jitter)
			cases = append(cases,
				stepCase{"per key, " + name, ds, []string{"k"}, drain.Pace{Interval: 20 * time.Millisecond, Retry: retry}, 50},
				stepCase{"per policy, " + name, ds, []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"},
					drain.Pace{Interval: 100 * time.Millisecond, Total: 20 * time.Millisecond, Retry: retry}, 50})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			adaptive := c.pace
			adaptive.Adapt.Scope = drain.AdaptKey
			if c.pace.Total > 0 {
				adaptive.Adapt.Scope = drain.AdaptPolicy
			}
			run := func(pace drain.Pace) (*stepRig, []float64) {
				r := newStepRig(t, pace, map[string]downstream.Config{"": c.ds})
				var rates []float64
				r.run(t, c.keys, 100, 3*phase, func(time.Duration) { rates = append(rates, c.rate(r.d)) })
				return r, rates
			}
			r, rates := run(adaptive)
			rf, _ := run(c.pace)
			for i, capacity := range capacities {
				from, to := time.Duration(i)*phase, time.Duration(i+1)*phase
				f := r.figures(c.keys, rates, from, to, capacity)
				t.Logf("adaptive %v", f)
				if f.settle < 0 || f.settle > 30*time.Second {
					t.Errorf("phase %d: the rate settled within 10 %% of %v/s after %v, want within 30 s", i, capacity, f.settle)
				}
				if f.failed*100 >= f.attempts {
					t.Errorf("phase %d: %d of %d attempts failed at steady state, want under 1 %%", i, f.failed, f.attempts)
				}
				if f.maxIn1s > int(c.ceiling)+1 {
					t.Errorf("phase %d: %d deliveries in one second, over the %v/s ceiling", i, f.maxIn1s, c.ceiling)
				}
				ff := rf.figures(c.keys, nil, from, to, capacity)
				t.Logf("fixed    capacity %4.0f/s: failed %d of %d attempts (%.1f %%), most in 1 s %d", capacity, ff.failed, ff.attempts,
					100*float64(ff.failed)/float64(max(ff.attempts, 1)), ff.maxIn1s)
			}
			st, sf := r.d.Stats(), rf.d.Stats()
			t.Logf("adaptive: delivered %d, failed %d, retries %d; downstream %+v", st.Delivered, st.Failed, st.Retries, r.sinks[""].Stats())
			t.Logf("fixed:    delivered %d, failed %d, retries %d; downstream %+v", sf.Delivered, sf.Failed, sf.Retries, rf.sinks[""].Stats())
			if st.Failed >= sf.Failed {
				t.Errorf("adaptive failed %d attempts, fixed %d: want the fixed pace to fail more against the slow phase", st.Failed, sf.Failed)
			}
		})
	}
}

// Per-key adaptation isolates keys: one key's slow downstream slows that
// key alone; the others keep their full outflow, without failures. The
// answers (StartIn) space the slow key's jobs by its effective rate, and a
// lower ceiling set live applies at once.
func TestAdaptIsolatesKeys(t *testing.T) {
	fast := downstream.Config{Capacity: 100, Latency: 20 * time.Millisecond, Jitter: 0.2, Seed: 2}
	slow := downstream.Config{Capacity: 4, Latency: 20 * time.Millisecond, Jitter: 0.2, Seed: 3}
	pace := drain.Pace{Interval: 50 * time.Millisecond, Retry: drain.Retry{Backoff: time.Second, MaxBackoff: 10 * time.Second, Budget: 0.2},
		Adapt: drain.Adapt{Scope: drain.AdaptKey}}
	keys := []string{"slow", "b", "c"}
	r := newStepRig(t, pace, map[string]downstream.Config{"slow": slow, "b": fast, "c": fast})
	rates := map[string][]float64{}
	r.run(t, keys, 100, time.Minute, func(time.Duration) {
		for _, key := range keys {
			rates[key] = append(rates[key], rateOf(r.d, key, 20))
		}
	})
	for _, key := range keys {
		capacity := 20.0 // the ceiling
		if key == "slow" {
			capacity = 4
		}
		f := r.figures([]string{key}, rates[key], 0, time.Minute, capacity)
		t.Logf("%-4s %v", key, f)
		if f.settle < 0 || f.settle > 30*time.Second || f.failed*100 >= max(f.attempts, 1) {
			t.Errorf("key %s: %v; want within 10 %% of %v/s within 30 s and under 1 %% failed", key, f, capacity)
		}
		if key != "slow" && (f.settle != 0 || f.failed > 0) {
			t.Errorf("key %s: %v; want it at its 20/s ceiling throughout, no failure: the slow key's downstream must not touch it", key, f)
		}
	}
	// The answers space the slow key's jobs by its effective rate.
	now := r.clock.Now()
	token, _ := queue.EncodeKey("slow")
	st, _ := r.d.AdaptStatus(token)
	gap := r.d.StartIn(token, 11, now) - r.d.StartIn(token, 1, now)
	want := 10 * time.Duration(float64(time.Second)/st.Rate)
	if d := gap - want; d < -10*time.Millisecond || d > 10*time.Millisecond {
		t.Errorf("StartIn of the slow key's 11th job − its 1st = %v, want 10 intervals at its effective %.2f/s = %v", gap, st.Rate, want)
	}
	tokenB, _ := queue.EncodeKey("b")
	if gap := r.d.StartIn(tokenB, 11, now) - r.d.StartIn(tokenB, 1, now); gap != 500*time.Millisecond {
		t.Errorf("StartIn of key b's 11th job − its 1st = %v, want 10 intervals of its 50 ms ceiling", gap)
	}
	// A lower ceiling applies at once, to the rate and to the answers.
	pace.Interval = time.Second
	r.d.SetPace(pace)
	for _, key := range keys {
		tk, _ := queue.EncodeKey(key)
		if st, ok := r.d.AdaptStatus(tk); !ok || st.Rate > 1 || st.Ceiling != 1 {
			t.Errorf("AdaptStatus(%s) after the ceiling fell to 1/s = %+v, %v; want a rate of at most 1/s", key, st, ok)
		}
		if gap := r.d.StartIn(tk, 11, now) - r.d.StartIn(tk, 1, now); gap != 10*time.Second {
			t.Errorf("StartIn of key %s's 11th job − its 1st after the ceiling fell to 1/s = %v, want 10 s", key, gap)
		}
	}
	// Adaptation turned off: the fixed outflow again, at once.
	pace.Interval, pace.Adapt = 50*time.Millisecond, drain.Adapt{}
	r.d.SetPace(pace)
	if st, ok := r.d.AdaptStatus(token); ok {
		t.Errorf("AdaptStatus(slow) after adaptation was turned off = %+v, want none", st)
	}
	if gap := r.d.StartIn(token, 11, now) - r.d.StartIn(token, 1, now); gap != 500*time.Millisecond {
		t.Errorf("StartIn of the slow key's 11th job − its 1st without adaptation = %v, want 10 fixed intervals of 50 ms", gap)
	}
}

// Random downstreams (base latency 2–200 ms with up to 100 % jitter, a
// slow phase of 10–40/s), per key and per policy: whatever the
// downstream, deliveries never exceed the ceiling in any second, fail
// under 1 % over the last 30 s of each phase, and the rate then averages
// within 15 % of the capacity. How many phases also met the step test's
// stricter figures (within 10 % within 30 s, and staying there) is
// logged.
func TestAdaptRandomDownstreams(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const phase = 60 * time.Second
	strict, phases := 0, 0
	retry := drain.Retry{Backoff: time.Second, MaxBackoff: 10 * time.Second, Budget: 0.2}
	for i := range 40 {
		low := 10 + rng.Float64()*30
		ds := downstream.Config{Capacity: 50, Latency: time.Duration(2+rng.IntN(200)) * time.Millisecond, Jitter: rng.Float64(),
			Seed: uint64(i), Timeout: time.Second, Phases: []downstream.Phase{{After: phase, Capacity: low}, {After: 2 * phase, Capacity: 50}}}
		keys := []string{"k"}
		pace := drain.Pace{Interval: 20 * time.Millisecond, Retry: retry, Adapt: drain.Adapt{Scope: drain.AdaptKey}}
		if i%2 == 1 {
			keys = []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"}
			pace = drain.Pace{Interval: 100 * time.Millisecond, Total: 20 * time.Millisecond, Retry: retry, Adapt: drain.Adapt{Scope: drain.AdaptPolicy}}
		}
		r := newStepRig(t, pace, map[string]downstream.Config{"": ds})
		c := stepCase{keys: keys, ceiling: 50}
		var rates []float64
		r.run(t, keys, 100, 3*phase, func(time.Duration) { rates = append(rates, c.rate(r.d)) })
		for p, capacity := range []float64{50, low, 50} {
			from, to := time.Duration(p)*phase, time.Duration(p+1)*phase
			f := r.figures(keys, rates, from, to, capacity)
			late := r.figures(keys, nil, to-30*time.Second, to, capacity)
			mean := 0.0
			for _, x := range rates[(to-30*time.Second)/(100*time.Millisecond) : to/(100*time.Millisecond)] {
				mean += x / 300
			}
			phases++
			if f.settle >= 0 && f.settle <= 30*time.Second && f.failed*100 < max(f.attempts, 1) {
				strict++
			}
			if late.failed*100 >= max(late.attempts, 1) || f.maxIn1s > 51 || mean < 0.85*capacity || mean > 1.15*capacity {
				t.Errorf("downstream %+v, keys %d, phase %d: mean rate %.1f/s over its last 30 s; there %d of %d failed; most in 1 s %d",
					ds, len(keys), p, mean, late.failed, late.attempts, f.maxIn1s)
			}
		}
	}
	t.Logf("%d of %d phases within 10 %% of the capacity within 30 s and staying there, under 1 %% failed", strict, phases)
}
