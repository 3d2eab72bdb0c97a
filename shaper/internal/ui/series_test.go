package ui_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/ui"
)

// source is a policy table whose counters grow at fixed rates with the
// (bubble's) clock: admitted 10/s, rejected 4/s, delivered 5/s; policy a
// adapts its outflow, to 3.5/s.
type source struct {
	start  time.Time
	mu     sync.Mutex
	names  []string
	depths map[string]uint64
	reads  int // Deepest calls
}

func (s *source) Figures() []ui.Figures {
	s.mu.Lock()
	defer s.mu.Unlock()
	secs := uint64(time.Since(s.start) / time.Second)
	var out []ui.Figures
	for _, n := range s.names {
		rate := math.NaN()
		if n == "a" {
			rate = 3.5
		}
		out = append(out, ui.Figures{Policy: n, Admitted: 10 * secs, Rejected: 4 * secs, Delivered: 5 * secs, Queued: 7, Rate: rate})
	}
	return out
}

func (s *source) Deepest(policy string, n int) []ui.KeyDepth {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	var out []ui.KeyDepth
	for k, d := range s.depths {
		if d > 0 {
			out = append(out, ui.KeyDepth{Key: k, Depth: d})
		}
	}
	slices.SortFunc(out, func(a, b ui.KeyDepth) int { return cmp.Or(cmp.Compare(b.Depth, a.Depth), cmp.Compare(a.Key, b.Key)) })
	return out[:min(n, len(out))]
}

func (s *source) File(policy string) (policies.Policy, bool) {
	return policies.Policy{Name: policy, Outflow: policies.Rate{N: 5, Per: time.Second}, Queue: 10, Overflow: policies.OverflowReject}, true
}

// answer is GET /v1/ui/series's body.
type answer struct {
	Now        int64 `json:"now"`
	IntervalMs int64 `json:"interval_ms"`
	WindowMs   int64 `json:"window_ms"`
	Policies   []struct {
		Name      string           `json:"name"`
		File      map[string]any   `json:"file"`
		Deepest   []ui.KeyDepth    `json:"deepest"`
		DeepestAt int64            `json:"deepest_at"`
		Samples   map[string][]any `json:"samples"`
	} `json:"policies"`
}

func get(t *testing.T, mux http.Handler, url, auth string) (*httptest.ResponseRecorder, answer) {
	t.Helper()
	req := httptest.NewRequest("GET", url, nil)
	req.RemoteAddr = "127.0.0.1:1234"
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	var a answer
	if rec.Code == http.StatusOK && strings.HasPrefix(url, "/v1/ui/series") {
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, rec.Body)
		}
	}
	return rec, a
}

// Samples are taken every interval over a bounded window, with the rates
// of the counters between two samples, and the time-in-queue and lateness
// quantiles of the drain events of each interval.
func TestSeriesSamplesRatesOverTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &source{start: time.Now(), names: []string{"a", "b"}}
		s := ui.New(src, ui.Config{Interval: time.Second, Window: 10 * time.Second})
		mux := httpapi.NewMux()
		s.Routes(mux, httpapi.Bearer("tok", "the page"), true)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx)

		rec := s.Recorder("a")
		time.Sleep(2500 * time.Millisecond) // samples at 1 s (the first, without rates) and 2 s
		for i := range 100 {
			wait := 100 * time.Millisecond
			if i >= 98 {
				wait = 5 * time.Second
			}
			now := time.Now()
			rec.Observe(drain.Event{Enqueued: now.Add(-wait), Scheduled: now.Add(-time.Millisecond), Started: now, Attempted: true})
		}
		time.Sleep(time.Second) // the sample at 3 s takes them
		_, a := get(t, mux, "/v1/ui/series", "tok")
		if len(a.Policies) != 2 || a.Policies[0].Name != "a" || a.Policies[1].Name != "b" {
			t.Fatalf("policies = %+v, want a and b", a.Policies)
		}
		sa := a.Policies[0].Samples
		if len(sa["t"]) != 3 {
			t.Fatalf("after 3.5 s: %d samples, want 3", len(sa["t"]))
		}
		if sa["admitted"][0] != nil || sa["admitted"][1] != 10.0 || sa["rejected"][2] != 4.0 || sa["delivered"][2] != 5.0 || sa["queued"][2] != 7.0 {
			t.Errorf("samples = %v, want the first rate unknown, then 10, 4 and 5 per second, 7 queued", sa)
		}
		if sa["rate"][2] != 3.5 || a.Policies[1].Samples["rate"][2] != nil {
			t.Errorf("adapted rates a %v, b %v; want a's 3.5/s, none for b", sa["rate"], a.Policies[1].Samples["rate"])
		}
		p50, p99, late := sa["in_queue_p50_ms"], sa["in_queue_p99_ms"], sa["lateness_p99_ms"]
		if p50[1] != nil || !near(p50[2], 100) || !near(p99[2], 5000) || !near(late[2], 1) {
			t.Errorf("quantiles = p50 %v, p99 %v, lateness %v; want none, then about 100 ms, 5 s and 1 ms", p50, p99, late)
		}
		if f := a.Policies[0].File; f["outflow"] != "5/s" || f["queue"] != 10.0 || f["overflow"] != "reject" || f["total"] != "" {
			t.Errorf("file = %v, want outflow 5/s, queue 10, overflow reject, total \"\"", f)
		}

		// Only samples after since; at most a window of them.
		last := int64(sa["t"][2].(float64))
		_, a = get(t, mux, fmt.Sprintf("/v1/ui/series?since=%d", last), "tok")
		if n := len(a.Policies[0].Samples["t"]); n != 0 {
			t.Errorf("samples since the last one = %d, want 0", n)
		}
		time.Sleep(20 * time.Second)
		_, a = get(t, mux, "/v1/ui/series", "tok")
		ts := a.Policies[0].Samples["t"]
		if len(ts) != 10 || a.Now-int64(ts[0].(float64)) > 10000 {
			t.Errorf("after 23.5 s: %d samples from %v ms before now, want the 10 of the 10 s window", len(ts), a.Now-int64(ts[0].(float64)))
		}

		// A policy gone from the source is forgotten after a window.
		src.mu.Lock()
		src.names = []string{"a"}
		src.mu.Unlock()
		time.Sleep(12 * time.Second)
		if _, a = get(t, mux, "/v1/ui/series", "tok"); len(a.Policies) != 1 {
			t.Errorf("a window after b went: %d policies, want 1", len(a.Policies))
		}
	})
}

func near(v any, want float64) bool {
	f, ok := v.(float64)
	return ok && f >= want*0.93 && f <= want*1.07
}

// The deepest keys are read only while the page asks for the series.
func TestDeepestKeysOnlyWhileWatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &source{start: time.Now(), names: []string{"a"}, depths: map[string]uint64{"x": 3, "y": 9, "z": 3, "idle": 0}}
		s := ui.New(src, ui.Config{Deepest: 2})
		mux := httpapi.NewMux()
		s.Routes(mux, httpapi.Bearer("", "the page"), false)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx)

		time.Sleep(time.Minute)
		src.mu.Lock()
		reads := src.reads
		src.mu.Unlock()
		if reads != 0 {
			t.Errorf("depths read %d times while nobody watched, want 0", reads)
		}
		get(t, mux, "/v1/ui/series", "")
		time.Sleep(ui.DefaultDepthsEvery + time.Second)
		_, a := get(t, mux, "/v1/ui/series", "")
		got := a.Policies[0].Deepest
		if len(got) != 2 || got[0] != (ui.KeyDepth{Key: "y", Depth: 9}) || got[1] != (ui.KeyDepth{Key: "x", Depth: 3}) || a.Policies[0].DeepestAt == 0 {
			t.Errorf("deepest = %v at %d, want y 9 then x 3 (by key on a tie), with the time read", got, a.Policies[0].DeepestAt)
		}
		time.Sleep(time.Minute) // no one asks: the reads stop
		src.mu.Lock()
		reads = src.reads
		src.mu.Unlock()
		time.Sleep(time.Minute)
		src.mu.Lock()
		defer src.mu.Unlock()
		if src.reads != reads {
			t.Errorf("depths read %d more times a minute after the page stopped asking, want 0", src.reads-reads)
		}
	})
}

// The page's files are open when a token is configured (the page asks for
// it), loopback-only without one; its data always needs admin access.
func TestRoutesGuard(t *testing.T) {
	s := ui.New(&source{start: time.Now()}, ui.Config{})
	withToken := httpapi.NewMux()
	s.Routes(withToken, httpapi.Bearer("tok", "the page"), true)
	noToken := httpapi.NewMux()
	s.Routes(noToken, httpapi.Bearer("", "the page"), false)
	for _, c := range []struct {
		mux        *httpapi.Mux
		path, from string
		auth       string
		want       int
	}{
		{withToken, "/ui/", "203.0.113.9:1", "", http.StatusOK},
		{withToken, "/v1/ui/access", "203.0.113.9:1", "", http.StatusOK},
		{withToken, "/v1/ui/series", "203.0.113.9:1", "", http.StatusUnauthorized},
		{withToken, "/v1/ui/series", "203.0.113.9:1", "bad", http.StatusForbidden},
		{withToken, "/v1/ui/series", "203.0.113.9:1", "tok", http.StatusOK},
		{withToken, "/v1/ui/series?since=x", "127.0.0.1:1", "tok", http.StatusBadRequest},
		{withToken, "/v1/ui/series?snce=1", "127.0.0.1:1", "tok", http.StatusBadRequest},
		{withToken, "/v1/ui/series?since=1&since=2", "127.0.0.1:1", "tok", http.StatusBadRequest},
		{noToken, "/ui/", "203.0.113.9:1", "", http.StatusForbidden},
		{noToken, "/ui/", "127.0.0.1:1", "", http.StatusOK},
		{noToken, "/v1/ui/series", "127.0.0.1:1", "", http.StatusOK},
		{noToken, "/ui/nothing.js", "127.0.0.1:1", "", http.StatusNotFound},
	} {
		req := httptest.NewRequest("GET", c.path, nil)
		req.RemoteAddr = c.from
		if c.auth != "" {
			req.Header.Set("Authorization", "Bearer "+c.auth)
		}
		rec := httptest.NewRecorder()
		c.mux.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("GET %s from %s (token %q) = %d, want %d", c.path, c.from, c.auth, rec.Code, c.want)
		}
		if c.path == "/ui/" && rec.Code == http.StatusOK {
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("GET /ui/ Content-Security-Policy = %q, want scripts from the page's origin only", csp)
			}
			if !strings.Contains(rec.Body.String(), `<script type="module" src="app.js">`) {
				t.Errorf("GET /ui/ is not the page: %.200s", rec.Body)
			}
		}
	}
}
