package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/internal/testenv"
)

// runCLI runs the producer CLI with args and returns its stdout.
func runCLI(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := runWith(ctx, &stdout, &stderr, append([]string{"producer"}, args...))
	if stderr.Len() > 0 {
		t.Logf("stderr:\n%s", stderr.String())
	}
	return stdout.String(), err
}

func decodeSendSummary(t *testing.T, out string) sendSummary {
	t.Helper()
	var s sendSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("send --json output is not a summary: %v\n%s", err, out)
	}
	return s
}

func TestSendHTTP(t *testing.T) {
	var (
		n       atomic.Int64
		mu      sync.Mutex
		paths   = map[string]bool{}
		keys    = map[string]bool{}
		idems   = map[string]bool{}
		payload []byte
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs/{policy}/{key}", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		paths[r.URL.EscapedPath()] = true
		keys[r.PathValue("key")] = true
		idems[r.Header.Get("Idempotency-Key")] = true
		payload = body
		mu.Unlock()
		i := n.Add(1) - 1
		switch i % 4 {
		case 0, 2:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":"j%d","policy":%q,"key":%q,"queued":1,"eta_ms":50}`, i, r.PathValue("policy"), r.PathValue("key"))
		case 1:
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			if i%8 == 5 {
				fmt.Fprint(w, `{"title":"Too Many Requests","status":429,"detail":"admission limit 600/m (token_bucket) of policy \"orders\" exceeded for this key","deferred":false}`)
				return
			}
			fmt.Fprint(w, `{"title":"queue full","status":429,"retry_after_ms":250,"deferred":false}`)
		case 3:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, `{"title":"queue full","status":429,"retry_after_ms":250,"deferred":true,"id":"j%d"}`, i)
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	out, err := runCLI(t, t.Context(), "send", "--http", srv.URL+"/", "--policy", "orders",
		"--key", "a b", "--key", "a.b", "--key", "ü", "--key", "a/b", "--key", "x,y",
		"--jobs", "40", "--concurrency", "4", "--size", "10", "--idempotency", "--json")
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	s := decodeSendSummary(t, out)
	want := map[string]int64{"queued": 20, "rejected": 10, "deferred": 10, "4xx": 0, "5xx": 0, "error": 0, "other": 0, "transport": 0}
	for k, w := range want {
		if got := s.Outcomes[k]; got != w {
			t.Errorf("outcomes[%s] = %d, want %d", k, got, w)
		}
	}
	if s.Sent != 40 || s.Keys != 5 {
		t.Errorf("sent, keys = %d, %d, want 40, 5", s.Sent, s.Keys)
	}
	// A refusal by the admission limit is a rejection, told apart in the details.
	if s.Details["429"] != 5 || s.Details["429 limited"] != 5 || s.Details["429 deferred"] != 10 {
		t.Errorf("details = %v, want 5 each of 429 and 429 limited, 10 of 429 deferred", s.Details)
	}
	if s.LatencyMs.Max <= 0 || s.LatencyMs.P50 > s.LatencyMs.P99 || s.LatencyMs.P99 > s.LatencyMs.Max {
		t.Errorf("latency = %+v, want 0 < p50 ≤ p99 ≤ max", s.LatencyMs)
	}
	wantPaths := []string{"/v1/jobs/orders/%C3%BC", "/v1/jobs/orders/a%20b", "/v1/jobs/orders/a%2Fb", "/v1/jobs/orders/a.b", "/v1/jobs/orders/x%2Cy"}
	if got := slices.Sorted(maps.Keys(paths)); !slices.Equal(got, wantPaths) {
		t.Errorf("request paths = %q, want %q", got, wantPaths)
	}
	wantKeys := []string{"a b", "a.b", "a/b", "x,y", "ü"}
	if got := slices.Sorted(maps.Keys(keys)); !slices.Equal(got, wantKeys) {
		t.Errorf("keys seen by the server = %q, want %q", got, wantKeys)
	}
	if len(idems) != 40 || idems[""] {
		t.Errorf("got %d distinct Idempotency-Keys (empty among them: %v), want 40", len(idems), idems[""])
	}
	if len(payload) != 10 {
		t.Errorf("payload is %d bytes, want 10", len(payload))
	}
	// HOST:PORT, as the shaper's own commands take --http, reaches it too.
	before := n.Load()
	if _, err := runCLI(t, t.Context(), "send", "--http", srv.Listener.Addr().String(), "--policy", "orders", "--jobs", "2"); err != nil || n.Load() != before+2 {
		t.Errorf("send --http HOST:PORT: %v, %d requests, want 2", err, n.Load()-before)
	}
}

func TestSendHTTPErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/bad"):
			http.Error(w, "bad key", http.StatusBadRequest)
		case strings.HasSuffix(r.URL.Path, "/down"):
			http.Error(w, "backend unavailable", http.StatusServiceUnavailable)
		default:
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}
	}))
	out, err := runCLI(t, t.Context(), "send", "--http", srv.URL, "--policy", "p",
		"--key", "bad", "--key", "down", "--key", "moved", "--jobs", "9", "--json")
	if err == nil || !strings.Contains(err.Error(), "9 of 9 jobs failed (4xx 3, 5xx 3, other 3)") {
		t.Errorf("send with every job failing = %v, want an error counting the failures", err)
	}
	s := decodeSendSummary(t, out)
	if s.Outcomes["4xx"] != 3 || s.Outcomes["5xx"] != 3 || s.Outcomes["other"] != 3 {
		t.Errorf("outcomes = %v, want 3 each of 4xx, 5xx, other", s.Outcomes)
	}
	if s.Details["400"] != 3 || s.Details["503"] != 3 || s.Details["307"] != 3 {
		t.Errorf("details = %v, want 3 each of 400, 503, 307", s.Details)
	}

	srv.Close() // now nothing listens there
	out, err = runCLI(t, t.Context(), "send", "--http", srv.URL, "--policy", "p", "--jobs", "3", "--json")
	if err == nil || !strings.Contains(err.Error(), "3 of 3 jobs failed (transport 3)") {
		t.Errorf("send with nothing listening = %v, want an error counting the failures", err)
	}
	s = decodeSendSummary(t, out)
	if s.Outcomes["transport"] != 3 || s.FirstError == "" {
		t.Errorf("outcomes = %v, first error %q, want 3 transport errors and the first one named", s.Outcomes, s.FirstError)
	}
}

// A policy the shaper does not know stops the run at its first answer,
// with the shaper's words (which name the policies it knows).
func TestSendUnknownPolicy(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"type":"about:blank","title":"Not Found","status":404,"detail":"unknown policy \"ordrs\"; known: orders, webhooks"}`)
	}))
	defer srv.Close()
	_, err := runCLI(t, t.Context(), "send", "--http", srv.URL, "--policy", "ordrs", "--jobs", "1000", "--concurrency", "2")
	if err == nil || !strings.Contains(err.Error(), `unknown policy "ordrs"; known: orders, webhooks`) || cmdline.ExitCode(err) != 2 {
		t.Errorf("send to an unknown policy = %v (exit %d), want the shaper's answer naming the known policies, exit 2", err, cmdline.ExitCode(err))
	}
	if got := n.Load(); got > 10 {
		t.Errorf("%d requests sent to an unknown policy, want the run to stop at the first answers", got)
	}
}

func TestSendDurationAndRate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	start := time.Now()
	out, err := runCLI(t, t.Context(), "send", "--http", srv.URL, "--policy", "p",
		"--jobs", "0", "--duration", "500ms", "--rate", "20/s", "--json")
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("send --duration 500ms took %v", d)
	}
	s := decodeSendSummary(t, out)
	// 20/s for 0.5 s: about 10 jobs; generous bounds for a loaded machine.
	if got := s.Outcomes["queued"]; got < 3 || got > 12 {
		t.Errorf("queued %d jobs at 20/s in 500ms, want about 10", got)
	}
}

func TestSendRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"send"},
		{"send", "--policy", "p", "--jobs", "0"},
		{"send", "--policy", "p", "--concurrency", "0"},
		{"send", "--policy", "p", "--rate", "fast"},
		{"send", "--policy", "p", "--http", "http://x", "--nats-url", "nats://x"},
	} {
		if _, err := runCLI(t, t.Context(), args...); err == nil {
			t.Errorf("producer %q: no error", args)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--speed", "2"}, "--speed runs a trace's clock faster: it needs --trace"},
		{[]string{"--http", "ftp://127.0.0.1:8080"}, `--http "ftp://127.0.0.1:8080": want the shaper's URL, such as http://127.0.0.1:8080, or HOST:PORT`},
		{[]string{"--http", "127.0.0.1:99999"}, `port "99999" is not a number from 1 to 65535`},
		{[]string{"--http", "http://"}, "want the shaper's URL"},
	} {
		_, err := runCLI(t, t.Context(), append([]string{"send", "--policy", "p", "--jobs", "1"}, tc.args...)...)
		if cmdline.ExitCode(err) != cmdline.ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("producer send %q: %v, want exit 2 saying %q", tc.args, err, tc.want)
		}
	}
}

// --token is sent as the bearer token a shaper started with
// --submit-token wants; over NATS it is refused, and a --nats-url that comes
// from PRODUCER_NATS_URL beside --http is named as the environment's.
func TestSendToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	out, err := runCLI(t, t.Context(), "send", "--http", srv.URL, "--policy", "p", "--jobs", "3", "--token", "s3cret", "--json")
	if s := decodeSendSummary(t, out); err != nil || s.Outcomes["queued"] != 3 {
		t.Errorf("send --token: %v, outcomes %v, want 3 queued", err, s.Outcomes)
	}
	t.Setenv("PRODUCER_TOKEN", "s3cret")
	out, err = runCLI(t, t.Context(), "send", "--http", srv.URL, "--policy", "p", "--jobs", "2", "--json")
	if s := decodeSendSummary(t, out); err != nil || s.Outcomes["queued"] != 2 {
		t.Errorf("send with PRODUCER_TOKEN: %v, outcomes %v, want 2 queued", err, s.Outcomes)
	}
	_, err = runCLI(t, t.Context(), "send", "--nats-url", "nats://127.0.0.1:1", "--policy", "p", "--jobs", "1")
	if err == nil || !strings.Contains(err.Error(), "over NATS the server's credentials go in --nats-url (nats://TOKEN@HOST:PORT") {
		t.Errorf("send --nats-url with a token = %v, want the token refused, naming where NATS credentials go", err)
	}
	t.Setenv("PRODUCER_TOKEN", "")
	t.Setenv("PRODUCER_NATS_URL", "nats://127.0.0.1:1")
	_, err = runCLI(t, t.Context(), "send", "--http", srv.URL, "--policy", "p", "--jobs", "1")
	if err == nil || !strings.Contains(err.Error(), "--nats-url comes from PRODUCER_NATS_URL") {
		t.Errorf("send --http with PRODUCER_NATS_URL set = %v, want the variable named", err)
	}
}

func TestSendNATS(t *testing.T) {
	s := testenv.NATS(t)
	nc := testenv.Connect(t, s)
	var (
		mu       sync.Mutex
		subjects = map[string]string{} // subject → Shaper-Key
		n        int
	)
	statuses := []string{`"status":"queued"`, `"status":"rejected"`, `"status":"deferred","retry_after_ms":10`, `"status":"error","code":400,"error":"bad key: empty"`,
		`"status":"rejected","code":429,"error":"admission limit 600/m (gcra) of policy \"orders\" exceeded for this key"`}
	sub, err := nc.Subscribe("shaper.submit.>", func(m *nats.Msg) {
		mu.Lock()
		subjects[m.Subject] = m.Header.Get("Shaper-Key")
		st := statuses[n%len(statuses)]
		n++
		mu.Unlock()
		_ = m.Respond([]byte(`{"id":"j","policy":"orders","key":"k",` + st + `}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	out, err := runCLI(t, t.Context(), "send", "--nats-url", s.ClientURL(), "--policy", "orders",
		"--key", "k-1", "--key", "a.b", "--jobs", "10", "--concurrency", "1", "--json")
	if err == nil || !strings.Contains(err.Error(), "2 of 10 jobs failed (error 2)") {
		t.Errorf("send = %v, want an error counting the 2 failed jobs", err)
	}
	sum := decodeSendSummary(t, out)
	for o, n := range map[string]int64{"queued": 2, "rejected": 4, "deferred": 2, "error": 2} {
		if sum.Outcomes[o] != n {
			t.Errorf("outcomes = %v, want 2 each of queued, deferred, error and 4 rejected", sum.Outcomes)
			break
		}
	}
	// A refusal by the admission limit is told apart, as over HTTP (a tour
	// saw a NATS run count 120 limited jobs as rejected, for a full queue).
	if sum.Details["error 400"] != 2 || sum.Details["rejected limited"] != 2 || sum.Details["rejected"] != 2 {
		t.Errorf("details = %v, want 2 each of \"error 400\", \"rejected limited\" and \"rejected\"", sum.Details)
	}
	want := map[string]string{"shaper.submit.orders.k-1": "k-1", "shaper.submit.orders.~YS5i": "a.b"}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(subjects) != fmt.Sprint(want) {
		t.Errorf("subjects → Shaper-Key = %v, want %v", subjects, want)
	}
}
