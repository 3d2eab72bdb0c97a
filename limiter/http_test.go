package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/limiter"
)

func TestSetHeaders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		res    limiter.Result
		window time.Duration
		want   map[string]string
	}{
		{
			name:   "allowed",
			res:    limiter.Result{Allowed: true, Limit: 600, Remaining: 599, Reset: 59*time.Second + time.Millisecond},
			window: time.Minute,
			want: map[string]string{
				"RateLimit-Policy":        `"orders";q=600;w=60`,
				"RateLimit":               `"orders";r=599;t=60`,
				"X-Ratelimit-Limit":       "600",
				"X-Ratelimit-Remaining":   "599",
				"Retry-After":             "",
				"X-Ratelimit-Retry-After": "",
			},
		},
		{
			name:   "rejected",
			res:    limiter.Result{Limit: 3, RetryAfter: 1500 * time.Millisecond, Reset: 2 * time.Second},
			window: 2 * time.Second,
			want: map[string]string{
				"RateLimit-Policy":        `"orders";q=3;w=2`,
				"RateLimit":               `"orders";r=0;t=2`,
				"X-Ratelimit-Limit":       "3",
				"X-Ratelimit-Remaining":   "0",
				"Retry-After":             "2",
				"X-Ratelimit-Retry-After": "2",
			},
		},
		{
			name: "rejected for under a second, no window",
			res:  limiter.Result{Limit: 3, RetryAfter: time.Microsecond, Reset: time.Microsecond},
			want: map[string]string{
				"RateLimit-Policy": "",
				"RateLimit":        `"orders";r=0;t=1`,
				"Retry-After":      "1",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			limiter.SetHeaders(h, "orders", tc.res, tc.window)
			for k, want := range tc.want {
				if got := h.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			for k, v := range h {
				if http.CanonicalHeaderKey(k) != k || len(v) != 1 {
					t.Errorf("header %q = %q: want one value under the canonical name", k, v)
				}
			}
		})
	}
}

func TestMiddleware(t *testing.T) {
	m, err := limiter.NewMemory(limiter.SlidingLog, limiter.Limit{Count: 2, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := limiter.Middleware(m, func(r *http.Request) string { return r.Header.Get("Tenant") })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	get := func(tenant string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("Tenant", tenant)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for i, want := range []int{200, 200, 429, 429} {
		rec := get("acme")
		if rec.Code != want {
			t.Fatalf("request %d: status %d, want %d", i+1, rec.Code, want)
		}
		if got := rec.Header().Get("RateLimit-Policy"); got != `"default";q=2;w=60` {
			t.Errorf("request %d: RateLimit-Policy = %q, want %q", i+1, got, `"default";q=2;w=60`)
		}
		retry := rec.Header().Get("Retry-After")
		if (retry != "") != (want == 429) {
			t.Errorf("request %d (%d): Retry-After = %q", i+1, want, retry)
		}
		if want == 429 && (retry != "60" || rec.Header().Get("X-Ratelimit-Retry-After") != "60") {
			t.Errorf("request %d: Retry-After = %q, want 60", i+1, retry)
		}
	}
	if rec := get("other"); rec.Code != 200 || rec.Header().Get("X-Ratelimit-Remaining") != "1" {
		t.Errorf("other tenant: status %d, remaining %q, want 200, 1", rec.Code, rec.Header().Get("X-Ratelimit-Remaining"))
	}
}

// failing is a Limiter whose backend is down.
type failing struct{ closed bool }

func (f failing) Allow(context.Context, string) (limiter.Result, error) {
	err := fmt.Errorf("test: %w", limiter.ErrUnavailable)
	if f.closed {
		return limiter.Result{Limit: 1, RetryAfter: time.Second}, err
	}
	return limiter.Result{Allowed: true, Limit: 1}, err
}

func TestMiddlewareBackendDown(t *testing.T) {
	for _, tc := range []struct {
		closed bool
		want   int
	}{{false, 200}, {true, 503}} {
		h := limiter.Middleware(failing{tc.closed}, nil)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != tc.want {
			t.Errorf("fail closed %v: status %d, want %d", tc.closed, rec.Code, tc.want)
		}
		if tc.closed && rec.Header().Get("Retry-After") != "1" {
			t.Errorf("fail closed: Retry-After = %q, want 1", rec.Header().Get("Retry-After"))
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", limiter.ErrUnavailable), limiter.ErrUnavailable) {
		t.Fatal("ErrUnavailable does not match through wrapping")
	}
}
