package limiter_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/limiter"
)

// at returns h:m:s on the test day, with ns nanoseconds.
func at(h, m, s int, ns ...int) time.Time {
	t := time.Date(2026, 11, 2, h, m, s, 0, time.UTC)
	for _, n := range ns {
		t = t.Add(time.Duration(n))
	}
	return t
}

// allower is met by the pointers to the five state types.
type allower interface {
	Allow(l limiter.Limit, now time.Time) limiter.Result
}

// step is one event of a step table: when it comes and what it must get.
type step struct {
	name       string
	at         time.Time
	allowed    bool
	remaining  int64
	retryAfter time.Duration
}

func runSteps(t *testing.T, s allower, l limiter.Limit, steps []step) {
	t.Helper()
	for _, st := range steps {
		got := s.Allow(l, st.at)
		if got.Allowed != st.allowed || got.Remaining != st.remaining || got.RetryAfter != st.retryAfter {
			t.Errorf("%s (%s): Allow = {Allowed:%v Remaining:%d RetryAfter:%v}, want {Allowed:%v Remaining:%d RetryAfter:%v}",
				st.name, st.at.Format("15:04:05.000000000"), got.Allowed, got.Remaining, got.RetryAfter, st.allowed, st.remaining, st.retryAfter)
		}
	}
}

// The fixed window's weakness: 5/min lets 10 through between 1:00:30 and
// 1:01:30, five on each side of the 1:01:00 boundary.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	l := limiter.Limit{Count: 5, Period: time.Minute}
	var s limiter.FixedWindowState
	runSteps(t, &s, l, []step{
		{"late in window 1", at(1, 0, 30), true, 4, 0},
		{"", at(1, 0, 40), true, 3, 0},
		{"", at(1, 0, 50), true, 2, 0},
		{"", at(1, 0, 55), true, 1, 0},
		{"last before boundary", at(1, 0, 59, 999_999_999), true, 0, 0},
		{"window 1 full", at(1, 0, 59, 999_999_999), false, 0, time.Nanosecond},
		{"boundary", at(1, 1, 0), true, 4, 0},
		{"", at(1, 1, 5), true, 3, 0},
		{"", at(1, 1, 10), true, 2, 0},
		{"", at(1, 1, 20), true, 1, 0},
		{"early in window 2", at(1, 1, 29), true, 0, 0},
		{"window 2 full", at(1, 1, 30), false, 0, 30 * time.Second},
	})
	// Ten admitted in the minute [1:00:30, 1:01:30): twice the limit.
}

// The sliding log at 2/min: 1:00:01 and 1:00:30 admitted, 1:00:50
// rejected, 1:01:40 admitted once 1:00:01 and 1:00:30 have left the window.
func TestSlidingLogWorkedExample(t *testing.T) {
	l := limiter.Limit{Count: 2, Period: time.Minute}
	var s limiter.SlidingLogState
	runSteps(t, &s, l, []step{
		{"first", at(1, 0, 1), true, 1, 0},
		{"second", at(1, 0, 30), true, 0, 0},
		{"third within a minute", at(1, 0, 50), false, 0, 11 * time.Second}, // until 1:00:01 leaves
		{"1:00:01 not yet out", at(1, 1, 0), false, 0, time.Second},         // (1:00:00, 1:01:00] still holds it
		{"after both left", at(1, 1, 40), true, 1, 0},
	})
	if got := len(s.Times); got != 1 {
		t.Errorf("log holds %d entries, want 1 (rejections are not logged)", got)
	}
}

// The sliding window counter at 7/min: 5 events in the previous minute, 3
// in this one, 30% into it: estimate 5·0.7+3 = 6.5 < 7, admitted; then 7.5,
// rejected.
func TestSlidingWindowWorkedExample(t *testing.T) {
	l := limiter.Limit{Count: 7, Period: time.Minute}
	var s limiter.SlidingWindowState
	for i := range 5 {
		if !s.Allow(l, at(1, 0, 10+i)).Allowed {
			t.Fatalf("event %d of the previous minute rejected", i+1)
		}
	}
	for i := range 3 {
		if !s.Allow(l, at(1, 1, 2+i)).Allowed {
			t.Fatalf("event %d of this minute rejected", i+1)
		}
	}
	now := at(1, 1, 18) // 30% into 1:01
	if got, want := s.Estimate(l, now), 6.5; got != want {
		t.Errorf("Estimate at 1:01:18 = %v, want %v", got, want)
	}
	runSteps(t, &s, l, []step{
		// remaining: ⌈7 − 7.5⌉ → 0
		{"estimate 6.5", now, true, 0, 0},
		// 7.5 ≥ 7 until 5·(60−e)/60 + 4 < 7, e > 24s: 1:01:24 + 1ns
		{"estimate 7.5", now, false, 0, 6*time.Second + time.Nanosecond},
		{"1ns before", at(1, 1, 24), false, 0, time.Nanosecond},
		{"estimate just below 7", at(1, 1, 24, 1), true, 0, 0},
	})
	// 5·0.6 + 5 = 8 (just below: 1ns past 1:01:24).
	if got, want := s.Estimate(l, at(1, 1, 24, 1)), 8.0; got >= want || got < want-1e-9 {
		t.Errorf("Estimate after = %v, want just below %v", got, want)
	}
}

func TestSlidingWindowRetryIntoNextWindow(t *testing.T) {
	l := limiter.Limit{Count: 3, Period: time.Minute}
	var s limiter.SlidingWindowState
	runSteps(t, &s, l, []step{
		{"", at(2, 0, 50), true, 2, 0},
		{"", at(2, 0, 50), true, 1, 0},
		{"", at(2, 0, 50), true, 0, 0},
		// Curr = Count: the estimate stays ≥ 3 until just after 2:01:00.
		{"full", at(2, 0, 55), false, 0, 5*time.Second + time.Nanosecond},
		{"boundary", at(2, 1, 0), false, 0, time.Nanosecond},
		{"after", at(2, 1, 0, 1), true, 0, 0},
	})
}

func TestGCRASteps(t *testing.T) {
	const interval = 666_666_666 // 2s/3, rounded down
	l := limiter.Limit{Count: 3, Period: 2 * time.Second}
	var s limiter.GCRAState
	runSteps(t, &s, l, []step{
		{"burst 1", at(3, 0, 0), true, 2, 0},
		{"burst 2", at(3, 0, 0), true, 1, 0},
		{"burst 3", at(3, 0, 0), true, 0, 0},
		{"bucket full", at(3, 0, 0), false, 0, interval},
		{"1ns early", at(3, 0, 0, interval-1), false, 0, 1},
		{"one leaked", at(3, 0, 0, interval), true, 0, 0},
		{"idle 2s", at(3, 0, 3), true, 2, 0},
	})
	burst := limiter.Limit{Count: 1, Period: time.Second, Burst: 5}
	var b limiter.GCRAState
	for i := range 5 {
		if r := b.Allow(burst, at(3, 0, 0)); !r.Allowed || r.Limit != 5 {
			t.Fatalf("burst event %d: %+v, want admitted with Limit 5", i+1, r)
		}
	}
	if r := b.Allow(burst, at(3, 0, 0)); r.Allowed || r.RetryAfter != time.Second {
		t.Errorf("6th event of a burst of 5 at 1/s: %+v, want rejected with RetryAfter 1s", r)
	}
}

func TestTokenBucketSteps(t *testing.T) {
	const refill = 666_666_667 // 2s/3, rounded up
	l := limiter.Limit{Count: 3, Period: 2 * time.Second}
	var s limiter.TokenBucketState
	runSteps(t, &s, l, []step{
		{"burst 1", at(3, 0, 0), true, 2, 0},
		{"burst 2", at(3, 0, 0), true, 1, 0},
		{"burst 3", at(3, 0, 0), true, 0, 0},
		{"empty", at(3, 0, 0), false, 0, refill},
		{"1ns early", at(3, 0, 0, refill-1), false, 0, 1},
		{"one token", at(3, 0, 0, refill), true, 0, 0},
		{"refilled", at(3, 0, 3), true, 2, 0},
	})
	burst := limiter.Limit{Count: 1, Period: time.Second, Burst: 5}
	var b limiter.TokenBucketState
	for i := range 5 {
		if r := b.Allow(burst, at(3, 0, 0)); !r.Allowed || r.Limit != 5 {
			t.Fatalf("burst event %d: %+v, want admitted with Limit 5", i+1, r)
		}
	}
	if r := b.Allow(burst, at(3, 0, 0)); r.Allowed || r.RetryAfter != time.Second || r.Reset != 5*time.Second {
		t.Errorf("6th event of a burst of 5 at 1/s: %+v, want rejected, RetryAfter 1s, Reset 5s", r)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, alg := range limiter.Algorithms {
		if got, err := limiter.ParseAlgorithm(" " + string(alg) + " "); got != alg || err != nil {
			t.Errorf("ParseAlgorithm(%q) = %q, %v, want %q, nil", alg, got, err, alg)
		}
	}
	if got, err := limiter.ParseAlgorithm("GCRA"); got != limiter.GCRA || err != nil {
		t.Errorf("ParseAlgorithm(%q) = %q, %v, want %q, nil", "GCRA", got, err, limiter.GCRA)
	}
	for _, in := range []string{"", "leaky_bucket", "sliding"} {
		if _, err := limiter.ParseAlgorithm(in); !errors.Is(err, limiter.ErrUnknownAlgorithm) {
			t.Errorf("ParseAlgorithm(%q) error = %v, want ErrUnknownAlgorithm", in, err)
		}
	}
}

func TestNewMemoryRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		alg  limiter.Algorithm
		l    limiter.Limit
		want error
	}{
		{limiter.GCRA, limiter.Limit{Count: 0, Period: time.Second}, limiter.ErrInvalidLimit},
		{limiter.GCRA, limiter.Limit{Count: 1, Period: 0}, limiter.ErrInvalidLimit},
		{limiter.TokenBucket, limiter.Limit{Count: 1, Period: time.Second, Burst: -1}, limiter.ErrInvalidLimit},
		{"leaky", limiter.Limit{Count: 1, Period: time.Second}, limiter.ErrUnknownAlgorithm},
	} {
		if _, err := limiter.NewMemory(tc.alg, tc.l); !errors.Is(err, tc.want) {
			t.Errorf("NewMemory(%q, %v) error = %v, want %v", tc.alg, tc.l, err, tc.want)
		}
	}
}

// Idle keys are dropped once they are back to their full quota.
func TestMemoryDropsIdleKeys(t *testing.T) {
	for _, alg := range limiter.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			l := limiter.Limit{Count: 3, Period: time.Second}
			m, err := limiter.NewMemory(alg, l)
			if err != nil {
				t.Fatal(err)
			}
			t0 := at(4, 0, 0)
			for i := range 1000 {
				m.AllowAt(fmt.Sprint("old", i), t0)
			}
			if got := m.Len(); got != 1000 {
				t.Fatalf("Len after 1000 keys = %d, want 1000", got)
			}
			t1 := t0.Add(3 * time.Second)
			for i := range 1000 {
				m.AllowAt(fmt.Sprint("new", i), t1)
			}
			if got := m.Len(); got != 1000 {
				t.Errorf("Len after the old keys idled and 1000 new ones = %d, want 1000", got)
			}
		})
	}
}

// A clock stepping back never admits more than the limit.
func TestClockStepsBack(t *testing.T) {
	l := limiter.Limit{Count: 3, Period: time.Minute}
	for _, tc := range []struct {
		alg limiter.Algorithm
		s   allower
	}{
		{limiter.GCRA, new(limiter.GCRAState)},
		{limiter.TokenBucket, new(limiter.TokenBucketState)},
		{limiter.FixedWindow, new(limiter.FixedWindowState)},
		{limiter.SlidingLog, new(limiter.SlidingLogState)},
		{limiter.SlidingWindow, new(limiter.SlidingWindowState)},
	} {
		for range l.Count {
			tc.s.Allow(l, at(5, 0, 30))
		}
		for _, back := range []time.Time{at(5, 0, 29), at(4, 59, 59), at(4, 50, 0)} {
			if r := tc.s.Allow(l, back); r.Allowed {
				t.Errorf("%s: full at 5:00:30, Allow at %s = %+v, want rejected", tc.alg, back.Format("15:04:05"), r)
			}
		}
	}
}
