package limiter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/shaper-dev/shaper/limiter"
)

// minute returns 1:mm:ss on the examples' day.
func minute(mm, ss int) time.Time { return time.Date(2026, 11, 2, 1, mm, ss, 0, time.UTC) }

// GCRA keeps one timestamp per key. At 3 per 2s it admits a burst of 3,
// then one every 666ms.
func ExampleGCRAState_Allow() {
	l := limiter.Limit{Count: 3, Period: 2 * time.Second}
	var s limiter.GCRAState
	t0 := minute(0, 0)
	for _, at := range []time.Duration{0, 0, 0, 0, 500 * time.Millisecond, 700 * time.Millisecond} {
		r := s.Allow(l, t0.Add(at))
		fmt.Printf("+%v: allowed=%v remaining=%d retry=%v\n", at, r.Allowed, r.Remaining, r.RetryAfter.Round(time.Millisecond))
	}
	// Output:
	// +0s: allowed=true remaining=2 retry=0s
	// +0s: allowed=true remaining=1 retry=0s
	// +0s: allowed=true remaining=0 retry=0s
	// +0s: allowed=false remaining=0 retry=667ms
	// +500ms: allowed=false remaining=0 retry=167ms
	// +700ms: allowed=true remaining=0 retry=0s
}

// A token bucket of 5 refilled at 1 per second: a burst of 5 after
// idleness, then the refill rate.
func ExampleTokenBucketState_Allow() {
	l := limiter.Limit{Count: 1, Period: time.Second, Burst: 5}
	var s limiter.TokenBucketState
	admitted := 0
	for range 10 {
		if s.Allow(l, minute(0, 0)).Allowed {
			admitted++
		}
	}
	fmt.Println("burst admitted:", admitted)
	r := s.Allow(l, minute(0, 2))
	fmt.Println("2s later:", r.Allowed, "remaining", r.Remaining)
	// Output:
	// burst admitted: 5
	// 2s later: true remaining 1
}

// The fixed window lets twice its limit through around a boundary.
func ExampleFixedWindowState_Allow() {
	l := limiter.Limit{Count: 5, Period: time.Minute}
	var s limiter.FixedWindowState
	admitted := 0
	for _, at := range []time.Time{minute(0, 50), minute(1, 10)} { // 20s apart
		for range 5 {
			if s.Allow(l, at).Allowed {
				admitted++
			}
		}
	}
	fmt.Println("admitted within 20 seconds:", admitted)
	// Output:
	// admitted within 20 seconds: 10
}

// The sliding log at 2 per minute.
func ExampleSlidingLogState_Allow() {
	l := limiter.Limit{Count: 2, Period: time.Minute}
	var s limiter.SlidingLogState
	for _, at := range []time.Time{minute(0, 1), minute(0, 30), minute(0, 50), minute(1, 40)} {
		r := s.Allow(l, at)
		fmt.Printf("%s allowed=%v retry=%v\n", at.Format("15:04:05"), r.Allowed, r.RetryAfter)
	}
	// Output:
	// 01:00:01 allowed=true retry=0s
	// 01:00:30 allowed=true retry=0s
	// 01:00:50 allowed=false retry=11s
	// 01:01:40 allowed=true retry=0s
}

// The sliding window counter estimates the last minute from two counters:
// 5 in the previous minute weighted 70%, plus 3 in this one.
func ExampleSlidingWindowState_Estimate() {
	l := limiter.Limit{Count: 7, Period: time.Minute}
	s := limiter.SlidingWindowState{Start: minute(1, 0), Prev: 5, Curr: 3}
	now := minute(1, 18) // 30% into the minute
	fmt.Println("estimate:", s.Estimate(l, now))
	fmt.Println("allowed:", s.Allow(l, now).Allowed)
	fmt.Println("then:", s.Allow(l, now).Allowed)
	// Output:
	// estimate: 6.5
	// allowed: true
	// then: false
}

// A Memory limiter keeps one state per key; AllowAt takes the time from
// the caller.
func ExampleMemory_AllowAt() {
	m, err := limiter.NewMemory(limiter.SlidingWindow, limiter.Limit{Count: 2, Period: time.Second})
	if err != nil {
		panic(err)
	}
	now := minute(0, 0)
	for _, key := range []string{"alice", "alice", "alice", "bob"} {
		r := m.AllowAt(key, now)
		fmt.Println(key, r.Allowed, r.Remaining)
	}
	fmt.Println("keys:", m.Len())
	// Output:
	// alice true 1
	// alice true 0
	// alice false 0
	// bob true 1
	// keys: 2
}

func ExampleSetHeaders() {
	h := http.Header{}
	limiter.SetHeaders(h, "orders", limiter.Result{Limit: 600, RetryAfter: 1200 * time.Millisecond, Reset: 30 * time.Second}, time.Minute)
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Retry-After"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// RateLimit-Policy: "orders";q=600;w=60
	// RateLimit: "orders";r=0;t=30
	// Retry-After: 2
	// X-Ratelimit-Limit: 600
	// X-Ratelimit-Remaining: 0
	// X-Ratelimit-Retry-After: 2
}

func ExampleMiddleware() {
	m, err := limiter.NewMemory(limiter.GCRA, limiter.Limit{Count: 1, Period: time.Minute})
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello") })
	h := limiter.Middleware(m, nil)(hello) // keyed by client IP
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit: "default";r=0;t=60 Retry-After: ""
	// 429 RateLimit: "default";r=0;t=60 Retry-After: "60"
}
