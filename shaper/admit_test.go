package shaper_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

var algorithms = []string{"gcra", "token_bucket", "fixed_window", "sliding_log", "sliding_window"}

func admitPolicies() string {
	var b strings.Builder
	b.WriteString("policies:\n")
	for _, alg := range algorithms {
		fmt.Fprintf(&b, "  - name: %s\n    outflow: 100/s\n    queue: 100\n    admit: {algorithm: %s, limit: 3/2s}\n", alg, alg)
	}
	b.WriteString("  - name: shadow\n    outflow: 100/s\n    queue: 100\n    admit: {algorithm: fixed_window, limit: 3/2s, shadow: true}\n")
	return b.String()
}

// checkAdmission runs the acceptance of an admit block of limit 3/2s: three
// submissions of a key pass, the fourth is 429 with Retry-After before the
// queue sees it, other keys are independent, and the key passes again after
// the window.
func checkAdmission(t *testing.T, r *running, policy string) {
	t.Helper()
	clearOfWindowEdge(2 * time.Second)
	for i := range 3 {
		if a := r.post(t, policy, "k", []byte("x")); a.code != http.StatusAccepted {
			t.Fatalf("%s: submission %d = %d %v, want 202", policy, i+1, a.code, a.body)
		}
	}
	a := r.post(t, policy, "k", []byte("x"))
	if a.code != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" || a.body["deferred"] != false {
		t.Fatalf("%s: 4th submission = %d %v (Retry-After %q), want 429 with Retry-After", policy, a.code, a.body, a.header.Get("Retry-After"))
	}
	if ra, _ := a.body["retry_after_ms"].(float64); ra <= 0 || ra > 2000 {
		t.Errorf("%s: retry_after_ms = %v, want within the 2 s window", policy, a.body["retry_after_ms"])
	}
	if got := a.header.Get("X-Ratelimit-Limit"); got != "3" {
		t.Errorf("%s: 429 X-Ratelimit-Limit = %q, want 3", policy, got)
	}
	if a := r.post(t, policy, "other", []byte("x")); a.code != http.StatusAccepted {
		t.Errorf("%s: another key = %d, want 202 (keys independent)", policy, a.code)
	}
	for _, st := range r.Status() {
		if st.Name == policy && (st.Admitted != 4 || st.Limited != 1) {
			t.Errorf("%s: admitted %d limited %d, want 4 and 1 (the 4th never reached the queue)", policy, st.Admitted, st.Limited)
		}
	}
	time.Sleep(2100 * time.Millisecond)
	if a := r.post(t, policy, "k", []byte("x")); a.code != http.StatusAccepted {
		t.Errorf("%s: after the window = %d %v, want 202", policy, a.code, a.body)
	}
}

// clearOfWindowEdge waits, when less than a second of the current window of
// length period is left, for the next one. Fixed windows start at multiples
// of their length (as in Redis): submissions on both sides of an edge are
// counted in two windows, which lets a fixed window admit up to twice its
// limit (the trade-off the algorithm is known for), not what these tests
// are about.
func clearOfWindowEdge(period time.Duration) {
	left := period - time.Duration(time.Now().UnixNano()%int64(period))
	if left < time.Second {
		time.Sleep(left + 20*time.Millisecond)
	}
}

func TestAdmitLimitInMemory(t *testing.T) {
	r := start(t, admitPolicies())
	for _, alg := range algorithms {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			checkAdmission(t, r, alg)
		})
	}
	t.Run("shadow", func(t *testing.T) {
		t.Parallel()
		clearOfWindowEdge(2 * time.Second)
		for range 5 {
			if a := r.post(t, "shadow", "k", []byte("x")); a.code != http.StatusAccepted {
				t.Errorf("shadow limit refused a job: %d", a.code)
			}
		}
		for _, st := range r.Status() {
			if st.Name == "shadow" && st.Shadow != 2 {
				t.Errorf("shadow_limited = %d, want 2", st.Shadow)
			}
		}
	})
}

func TestAdmitLimitInRedis(t *testing.T) {
	redis := testenv.StartRedis(t)
	r := start(t, admitPolicies(), func(c *shaper.Config) { c.RedisURL = "redis://" + redis.Addr() })
	for _, alg := range algorithms {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			checkAdmission(t, r, alg)
		})
	}
}

func TestAdmitRedisOutage(t *testing.T) {
	redis := testenv.StartRedis(t)
	r := start(t, `
policies:
  - name: open
    outflow: 100/s
    queue: 100
    admit: {algorithm: gcra, limit: 1/m, fail: open}
  - name: closed
    outflow: 100/s
    queue: 100
    admit: {algorithm: gcra, limit: 1/m, fail: closed}
`, func(c *shaper.Config) { c.RedisURL = "redis://" + redis.Addr() })
	r.post(t, "open", "k", nil)
	r.post(t, "closed", "k", nil)
	redis.Stop()
	start := time.Now()
	if a := r.post(t, "open", "k2", nil); a.code != http.StatusAccepted {
		t.Errorf("fail open with Redis down = %d %v, want 202", a.code, a.body)
	}
	// Failing open is not admitting without limit: the shaper enforces its
	// local share of the limit (here all of it: it is the only shaper), and says so.
	if a := r.post(t, "open", "k2", nil); a.code != http.StatusTooManyRequests || !strings.Contains(a.body["detail"].(string), "local share") {
		t.Errorf("second job of k2 with Redis down = %d %v, want 429 from the local share", a.code, a.body)
	}
	if a := r.post(t, "closed", "k2", nil); a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Errorf("fail closed with Redis down = %d %v, want 503 with Retry-After", a.code, a.body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("two decisions with Redis down took %v, want them bounded by the limiter timeout", d)
	}
	// The status says since when, for each policy whose decisions failed
	// (a tour's fail-closed policy answered every submission 503 while
	// /readyz and shaper status looked healthy).
	for _, st := range r.Status() {
		if st.LimiterDownSince.IsZero() || st.LimiterDownSince.Before(start.Add(-time.Second)) {
			t.Errorf("%s with Redis down: limiter_unavailable_since %v, want since the outage (%v)", st.Name, st.LimiterDownSince, start)
		}
	}
	redis.Start()
	waitFor(t, "limiter recovers when Redis returns", 10*time.Second, func() bool {
		return r.post(t, "closed", "k3", nil).code == http.StatusAccepted
	})
	if a := r.post(t, "closed", "k3", nil); a.code != http.StatusTooManyRequests {
		t.Errorf("after recovery a second job of k3 = %d, want 429 (limits enforced again)", a.code)
	}
	if st := r.Status(); !st[0].LimiterDownSince.IsZero() && st[0].Name == "closed" {
		t.Errorf("closed after recovery: limiter_unavailable_since %v, want none", st[0].LimiterDownSince)
	}
}

// An admission limit's 429 announces its quota over the window that makes
// it the limit's rate: a bucket's burst over the time the rate refills it
// (30/m with burst 5: 5 per 10 s, not 5 per minute), a window
// algorithm's count over its period.
func TestAdmitLimitPolicyHeader(t *testing.T) {
	r := start(t, `
policies:
  - {name: bucket, outflow: 100/s, queue: 100, admit: {algorithm: token_bucket, limit: 30/m, burst: 5}}
  - {name: gcra, outflow: 100/s, queue: 100, admit: {algorithm: gcra, limit: 30/m}}
  - {name: window, outflow: 100/s, queue: 100, admit: {algorithm: fixed_window, limit: 3/m}}
`)
	for _, tc := range []struct{ policy, want string }{
		{"bucket", `"bucket";q=5;w=10`},
		{"gcra", `"gcra";q=30;w=60`},
		{"window", `"window";q=3;w=60`},
	} {
		var a answer
		for range 40 {
			if a = r.post(t, tc.policy, "k", []byte("x")); a.code == http.StatusTooManyRequests {
				break
			}
		}
		if got := a.header.Get("RateLimit-Policy"); a.code != http.StatusTooManyRequests || got != tc.want {
			t.Errorf("%s: %d, RateLimit-Policy %q, want 429 with %q", tc.policy, a.code, got, tc.want)
		}
	}
}
