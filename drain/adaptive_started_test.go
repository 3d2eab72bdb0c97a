package drain_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/drain/downstream"
)

// wallClock is the time package's clock: under synctest, a virtual one
// that moves while every goroutine of the test waits.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
func (wallClock) NewTimer(d time.Duration) drain.Timer {
	return wallTimer{time.NewTimer(d)}
}

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time   { return w.t.C }
func (w wallTimer) Reset(d time.Duration) { w.t.Reset(d) }
func (w wallTimer) Stop()                 { w.t.Stop() }

// The step test on a started Drainer (Start: its scheduler and workers,
// each delivery taking the downstream's latency, a key busy meanwhile),
// under testing/synctest: the same figures as TestAdaptStep, per key and
// per policy, beside the fixed pace.
func TestAdaptStepStarted(t *testing.T) {
	const phase = 60 * time.Second
	capacities := []float64{50, 20, 50}
	retry := drain.Retry{Backoff: time.Second, MaxBackoff: 10 * time.Second, Budget: 0.2}
	ds := downstream.Config{Capacity: capacities[0], Latency: 20 * time.Millisecond, Jitter: 0.5, Seed: 1, Timeout: time.Second, Wait: true,
		Phases: []downstream.Phase{{After: phase, Capacity: capacities[1]}, {After: 2 * phase, Capacity: capacities[2]}}}
	for _, c := range []stepCase{
		{"per key", ds, []string{"k"}, drain.Pace{Interval: 20 * time.Millisecond, Retry: retry}, 50},
		// Deliveries that fly apart from their steps (Concurrency.Key above
		// 1) feed the controller with their receipts as a step's do.
		{"per key, 4 awaiting receipt", ds, []string{"k"}, drain.Pace{Interval: 20 * time.Millisecond, Retry: retry,
			Concurrency: drain.Concurrency{Key: 4}}, 50},
		{"per policy", ds, manyKeys(50), drain.Pace{Interval: 200 * time.Millisecond, Total: 20 * time.Millisecond, Retry: retry}, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			adaptive := c.pace
			adaptive.Adapt.Scope = drain.AdaptKey
			if c.pace.Total > 0 {
				adaptive.Adapt.Scope = drain.AdaptPolicy
			}
			var r, rf *stepRig
			var rates []float64
			synctest.Test(t, func(t *testing.T) { r, rates = runStarted(t, c, adaptive, 3*phase) })
			synctest.Test(t, func(t *testing.T) { rf, _ = runStarted(t, c, c.pace, 3*phase) })
			for i, capacity := range capacities {
				from, to := time.Duration(i)*phase, time.Duration(i+1)*phase
				f := r.figures(c.keys, rates, from, to, capacity)
				ff := rf.figures(c.keys, nil, from, to, capacity)
				t.Logf("adaptive %v", f)
				t.Logf("fixed    capacity %4.0f/s: failed %d of %d attempts (%.1f %%), latency %v, most in 1 s %d", capacity, ff.failed, ff.attempts,
					100*float64(ff.failed)/float64(max(ff.attempts, 1)), ff.latency.Round(time.Millisecond), ff.maxIn1s)
				if f.settle < 0 || f.settle > 30*time.Second || f.failed*100 >= max(f.attempts, 1) || f.maxIn1s > int(c.ceiling)+1 {
					t.Errorf("phase %d: %v; want within 10 %% of the capacity within 30 s, staying there, under 1 %% failed, at most %v in a second",
						i, f, c.ceiling+1)
				}
			}
			st, sf := r.d.Stats(), rf.d.Stats()
			t.Logf("adaptive: delivered %d, failed %d, retries %d; downstream %+v", st.Delivered, st.Failed, st.Retries, r.sinks[""].Stats())
			t.Logf("fixed:    delivered %d, failed %d, retries %d; downstream %+v", sf.Delivered, sf.Failed, sf.Retries, rf.sinks[""].Stats())
		})
	}
}

// manyKeys returns n key names.
func manyKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	return keys
}

// runStarted runs c's keys, kept backlogged, through a started Drainer at
// pace for length, sampling the effective rate every 100 ms. Call it in a
// synctest bubble.
func runStarted(t *testing.T, c stepCase, pace drain.Pace, length time.Duration) (*stepRig, []float64) {
	ds, err := downstream.New(wallClock{}, c.ds)
	if err != nil {
		t.Fatal(err)
	}
	r := &stepRig{now: time.Now, t0: time.Now(), sinks: map[string]*downstream.Downstream{"": ds}}
	if r.q, err = drain.NewMemQueue("p", 1000, drain.MemQueueConfig{}); err != nil {
		t.Fatal(err)
	}
	r.d = drain.New(r.q, r, pace, drain.Config{Clock: wallClock{}, Jitter: func() float64 { return 0.5 }})
	r.d.Start(t.Context())
	var rates []float64
	for at := time.Duration(0); at < length; at += 100 * time.Millisecond {
		r.topUp(t, c.keys, 20, time.Now())
		time.Sleep(100 * time.Millisecond)
		rates = append(rates, c.rate(r.d))
	}
	r.d.Stop()
	return r, rates
}
