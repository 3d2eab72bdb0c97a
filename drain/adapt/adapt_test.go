package adapt

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// feed observes n deliveries every interval from start, with the latency
// and outcome of the i-th from sample, and returns when the next would
// start.
func feed(c *Controller, start time.Time, n int, interval time.Duration, sample func(i int) (time.Duration, Outcome)) time.Time {
	for i := range n {
		latency, outcome := sample(i)
		c.Observe(Sample{Start: start, Latency: latency, Outcome: outcome})
		start = start.Add(interval)
	}
	return start
}

func steady(latency time.Duration) func(int) (time.Duration, Outcome) {
	return func(int) (time.Duration, Outcome) { return latency, Delivered }
}

func TestNewStartsAtCeiling(t *testing.T) {
	c := New(Config{}, 50)
	if st := c.Status(); st.Rate != 50 || st.Floor != 5 || st.Reason.Kind != AtCeiling {
		t.Errorf("New(50).Status() = %+v, want rate 50, floor 5 (10 %%), at ceiling", st)
	}
	if got := c.Interval(); got != 20*time.Millisecond {
		t.Errorf("Interval() = %v, want 20ms", got)
	}
	c.SetCeiling(10)
	if c.Rate() != 10 {
		t.Errorf("Rate() after SetCeiling(10) = %v, want 10 at once", c.Rate())
	}
	c.SetCeiling(20)
	if c.Rate() != 20 {
		t.Errorf("Rate() at the ceiling after SetCeiling(20) = %v, want 20: nothing held it back", c.Rate())
	}
	c.rate = 15 // held under the ceiling: it stays, and probes up from there
	c.SetCeiling(40)
	if c.Rate() != 15 {
		t.Errorf("Rate() of 15 under a ceiling raised to 40 = %v, want 15", c.Rate())
	}
	c.SetCeiling(20)
	c.SetConfig(Config{Floor: 20}, 10)
	if c.Rate() != 10 || c.Status().Floor != 10 {
		t.Errorf("a floor above the ceiling: %+v, want floor and rate at the ceiling", c.Status())
	}
}

// Deliveries at the ceiling with a steady latency keep it there.
func TestSteadyLatencyKeepsCeiling(t *testing.T) {
	c := New(Config{}, 50)
	feed(c, t0, 500, 20*time.Millisecond, steady(30*time.Millisecond))
	if st := c.Status(); st.Rate != 50 || st.Reason.Kind != AtCeiling || st.Baseline != 30*time.Millisecond {
		t.Errorf("Status() = %+v, want at the ceiling with a 30 ms baseline", st)
	}
}

// A downstream serving 20/s fed at 50/s: its queue delay grows 1.5 s per
// second. One window measures the capacity from the slope, and the rate
// goes just under it, never below the floor.
func TestQueueGivesCapacity(t *testing.T) {
	c := New(Config{}, 50)
	at := feed(c, t0, 102, 20*time.Millisecond, steady(20*time.Millisecond)) // two windows: learns the baseline
	slow := func(i int) (time.Duration, Outcome) {
		return 20*time.Millisecond + time.Duration(float64(i)*0.02*1.5*float64(time.Second)), Delivered
	}
	before := c.Rate()
	at = feed(c, at, 51, 20*time.Millisecond, slow)
	st := c.Status()
	if math.Abs(st.Capacity-20) > 0.5 {
		t.Errorf("capacity estimated %.2f/s, want 20/s (rate before %v)", st.Capacity, before)
	}
	if st.Rate > 20 || st.Rate < 20*(1-maxDrainCut) || st.Reason.Kind != Latency {
		t.Errorf("Status() = %+v, want a rate at most 15 %% under 20/s, for latency", st)
	}
	// Once the queue is gone, the rate returns toward the capacity, and
	// probes above it only in small steps.
	rate := st.Rate
	for range 5 {
		at = feed(c, at, 25, time.Duration(float64(time.Second)/c.Rate()), steady(20*time.Millisecond))
		if c.Rate() < rate || c.Rate() > 1.1*20 {
			t.Errorf("rate %.2f after %.2f with no queue, want it rising toward 20/s, at most 10 %% over", c.Rate(), rate)
		}
		rate = c.Rate()
	}
	if c.Rate() < 0.9*20 {
		t.Errorf("rate %.2f after five clear windows, want within 10 %% of 20/s", c.Rate())
	}
}

// Windows in which every delivery timed out back off once, then hold for
// holdWindows windows while the downstream works off its queue, then back
// off again; never below the floor.
func TestTimeoutsBackOffThenHold(t *testing.T) {
	c := New(Config{Floor: 2}, 50)
	timeout := func(int) (time.Duration, Outcome) { return time.Second, TimedOut }
	at := feed(c, t0, 51, 20*time.Millisecond, timeout)
	want := 50 * backoff
	if math.Abs(c.Rate()-want) > 0.01 || c.Status().Reason.Kind != Timeouts {
		t.Fatalf("after a window of timeouts: %+v, want rate %.1f for timeouts", c.Status(), want)
	}
	for i := range holdWindows {
		at = feed(c, at, 40, time.Duration(float64(time.Second)/c.Rate()), timeout)
		if math.Abs(c.Rate()-want) > 0.01 {
			t.Fatalf("blind window %d after the cut: rate %.2f, want it held at %.1f", i+1, c.Rate(), want)
		}
		// A tour read "5 timeouts of 5 in 8s" beside a rate near the
		// ceiling as a cut that did not happen: a held rate says so.
		if r := c.Status().Reason; r.Kind != Timeouts || r.Hold != holdWindows-i || !strings.Contains(r.String(), fmt.Sprintf("held while the downstream works off what it queued, cut again after %d more", holdWindows-i)) {
			t.Fatalf("blind window %d after the cut: reason %+v (%q), want timeouts held for %d more windows", i+1, r, r, holdWindows-i)
		}
	}
	feed(c, at, 40, time.Duration(float64(time.Second)/c.Rate()), timeout)
	if c.Rate() >= want || c.Status().Reason.Hold != 0 {
		t.Errorf("after %d blind windows: rate %.2f, reason %q, want another back-off", holdWindows+1, c.Rate(), c.Status().Reason)
	}
	for range 50 {
		at = feed(c, at, 10, time.Duration(float64(time.Second)/c.Rate()), timeout)
	}
	if c.Rate() != 2 {
		t.Errorf("rate %.2f after many timeouts, want the floor 2", c.Rate())
	}
}

// A downstream asking for pauses (429/503) backs the rate off, and says so.
func TestThrottledBacksOff(t *testing.T) {
	c := New(Config{}, 50)
	feed(c, t0, 51, 20*time.Millisecond, func(i int) (time.Duration, Outcome) {
		if i%10 == 0 {
			return time.Millisecond, Throttled
		}
		return 20 * time.Millisecond, Delivered
	})
	st := c.Status()
	if st.Rate >= 50 || st.Reason.Kind != Throttled429 || st.Reason.Count != 6 {
		t.Errorf("Status() = %+v, want a back-off for 6 pauses asked", st)
	}
	if got, want := st.Reason.String(), "6 pauses asked (429/503) of 51 in 1s"; got != want {
		t.Errorf("Reason.String() = %q, want %q", got, want)
	}
}

// A rate the key does not use (too few jobs) is held, not probed up.
func TestUnusedRateHeld(t *testing.T) {
	c := New(Config{}, 50)
	c.rate = 20
	feed(c, t0, 20, 200*time.Millisecond, steady(20*time.Millisecond)) // 5/s offered
	if c.Rate() != 20 || c.Status().Reason.Kind != Unused {
		t.Errorf("Status() = %+v, want the rate held at 20 as unused", c.Status())
	}
}

// A configured target latency replaces the learned baseline.
func TestLatencyTarget(t *testing.T) {
	c := New(Config{Latency: 100 * time.Millisecond}, 50)
	feed(c, t0, 51, 20*time.Millisecond, steady(80*time.Millisecond))
	if c.Rate() != 50 {
		t.Errorf("latency 80 ms under a 100 ms target: rate %v, want the ceiling", c.Rate())
	}
	c2 := New(Config{Latency: 100 * time.Millisecond}, 50)
	feed(c2, t0, 51, 20*time.Millisecond, steady(150*time.Millisecond))
	if st := c2.Status(); st.Rate >= 50 || st.Reason.Kind != Latency || st.Reason.Target != 100*time.Millisecond {
		t.Errorf("latency 150 ms over a 100 ms target: %+v, want a lower rate for latency", st)
	}
}

func TestReasonString(t *testing.T) {
	for _, tc := range []struct {
		r    Reason
		want string
	}{
		{Reason{Kind: Latency, Ratio: 2.14, Target: 30 * time.Millisecond}, "latency 2.1× baseline (target 30ms)"},
		{Reason{Kind: Timeouts, Count: 3, Of: 40, Window: 10 * time.Second}, "3 timeouts of 40 in 10s"},
		{Reason{Kind: Timeouts, Count: 5, Of: 5, Window: 8 * time.Second, Hold: 1}, "5 timeouts of 5 in 8s: held while the downstream works off what it queued, cut again after 1 more such window"},
		{Reason{Kind: Failures, Count: 5, Of: 20, Window: time.Second}, "5 failures of 20 in 1s"},
		{Reason{Kind: Recovering, Capacity: 19.5}, "recovering toward 19.5/s"},
		{Reason{Kind: AtCeiling}, "at ceiling"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.r, got, tc.want)
		}
	}
	for k := AtCeiling; k <= Failures; k++ {
		if k.String() == "" || k.String()[0] == 'k' {
			t.Errorf("Kind(%d) has no name", k)
		}
	}
}

// A downstream that got slower for good (its service time 20 ms, then
// 125 ms, with room to spare: no queue, the latency flat) is cut at most
// twice, not to the floor: cut after cut its latency neither rose nor
// fell, so it is learnt as the baseline and the rate returns to the
// ceiling. It was cut by about 5 % every window, down to the floor, while
// the baseline crept up 0.2 % a window (a tour found 2.5/s of a ceiling of
// 20 against a downstream taking 8).
func TestSlowerDownstreamIsNoQueue(t *testing.T) {
	c := New(Config{}, 20)
	at := feed(c, t0, 60, 50*time.Millisecond, steady(20*time.Millisecond))
	lowest := c.Rate()
	for range 40 {
		at = feed(c, at, int(math.Ceil(c.Rate())), time.Duration(float64(time.Second)/c.Rate()), steady(125*time.Millisecond))
		lowest = min(lowest, c.Rate())
	}
	st := c.Status()
	if lowest < 0.7*20 || st.Rate < 0.95*20 || st.Baseline != 125*time.Millisecond {
		t.Errorf("a downstream 125 ms slow with no queue: lowest rate %.2f, now %+v; want at least 14/s, back to 20/s, the baseline 125 ms", lowest, st)
	}
}
