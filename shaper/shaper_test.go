package shaper_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper"
)

const burstPolicy = `
policies:
  - name: burst
    outflow: 20/s
    queue: 10
    overflow: reject
`

func TestSubmitAccepted(t *testing.T) {
	r := start(t, burstPolicy)
	wait := collect(t, r.nc, "shaper.out.burst.>")
	a := r.post(t, "burst", "acme", []byte("hi"))
	if a.code != http.StatusAccepted {
		t.Fatalf("POST = %d %v, want 202", a.code, a.body)
	}
	for _, f := range []string{"id", "policy", "key", "queued", "eta_ms"} {
		if _, ok := a.body[f]; !ok {
			t.Errorf("202 body %v lacks %q", a.body, f)
		}
	}
	if a.body["policy"] != "burst" || a.body["key"] != "acme" || a.body["queued"] != 1.0 {
		t.Errorf("202 body = %v, want policy burst, key acme, queued 1", a.body)
	}
	for _, h := range []string{"RateLimit-Policy", "RateLimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining"} {
		if a.header.Get(h) == "" {
			t.Errorf("202 lacks header %s", h)
		}
	}
	if got := a.header.Get("X-Ratelimit-Limit"); got != "10" {
		t.Errorf("X-Ratelimit-Limit = %q, want 10", got)
	}
	m := wait(1, 5*time.Second)[0]
	if string(m.Data) != "hi" || m.Subject != "shaper.out.burst.acme" {
		t.Errorf("delivery = %s %q, want shaper.out.burst.acme \"hi\"", m.Subject, m.Data)
	}
	for h, want := range map[string]string{queue.HeaderJobID: a.body["id"].(string), queue.HeaderPolicy: "burst", queue.HeaderKey: "acme", queue.HeaderAttempt: "1"} {
		if got := m.Header.Get(h); got != want {
			t.Errorf("delivery header %s = %q, want %q", h, got, want)
		}
	}
	if m.Header.Get(queue.HeaderEnqueuedAt) == "" || len(m.Header.Get("traceparent")) != 55 {
		t.Errorf("delivery headers %v lack Shaper-Enqueued-At or a traceparent", m.Header)
	}
}

func TestBurstAgainstFullQueue(t *testing.T) {
	r := start(t, burstPolicy)
	wait := collect(t, r.nc, "shaper.out.burst.>")
	var (
		mu       sync.Mutex
		accepted []answer
		rejected []answer
		wg       sync.WaitGroup
	)
	for i := range 50 {
		wg.Go(func() {
			a := r.post(t, "burst", "k", []byte(fmt.Sprint(i)))
			mu.Lock()
			defer mu.Unlock()
			switch a.code {
			case http.StatusAccepted:
				accepted = append(accepted, a)
			case http.StatusTooManyRequests:
				rejected = append(rejected, a)
			default:
				t.Errorf("POST = %d %v", a.code, a.body)
			}
		})
	}
	wg.Wait()
	if len(accepted) != 10 || len(rejected) != 40 {
		t.Fatalf("50 concurrent submissions: %d × 202, %d × 429; want 10, 40", len(accepted), len(rejected))
	}
	for _, a := range rejected {
		for _, h := range []string{"Retry-After", "X-Ratelimit-Retry-After", "RateLimit-Policy", "RateLimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining"} {
			if a.header.Get(h) == "" {
				t.Errorf("429 lacks header %s (headers %v)", h, a.header)
			}
		}
		if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("429 Content-Type = %q", ct)
		}
		ra, ok := a.body["retry_after_ms"].(float64)
		if !ok || ra <= 0 || ra > 1000 {
			t.Errorf("429 retry_after_ms = %v, want the time until a slot frees (0 < x <= 1000)", a.body["retry_after_ms"])
		}
		if a.body["deferred"] != false {
			t.Errorf("429 deferred = %v, want false", a.body["deferred"])
		}
		if a.header.Get("X-Ratelimit-Remaining") != "0" {
			t.Errorf("429 X-Ratelimit-Remaining = %q, want 0", a.header.Get("X-Ratelimit-Remaining"))
		}
	}
	ids := map[string]bool{}
	for _, a := range accepted {
		ids[a.body["id"].(string)] = true
	}
	ms := wait(10, 10*time.Second)
	arrivals := make([]time.Time, len(ms))
	for i, m := range ms {
		if !ids[m.Header.Get(queue.HeaderJobID)] {
			t.Errorf("delivery %d has id %q, not one of the ids answered 202", i, m.Header.Get(queue.HeaderJobID))
		}
		arrivals[i] = received(m)
	}
	// Paced 50 ms apart: delivery i in slot i, never ahead of it, and not
	// far behind it.
	for _, bad := range testenv.Paced(arrivals, 50*time.Millisecond, 300*time.Millisecond) {
		t.Error(bad)
	}
}

func TestHostileKeysAndBadInput(t *testing.T) {
	r := start(t, `
policies:
  - name: p
    outflow: 100/s
    queue: 5
`)
	wait := collect(t, r.nc, "shaper.out.p.>")
	keys := []string{"a.b", "*", ">", "a.>", "with space", "ключ", "$SYS", "a/b", "~x", strings.Repeat("k", 256)}
	for _, k := range keys {
		if a := r.post(t, "p", k, []byte(k)); a.code != http.StatusAccepted || a.body["key"] != k {
			t.Errorf("POST key %q = %d %v, want 202 with the key", k, a.code, a.body)
		}
	}
	ms := wait(len(keys), 10*time.Second)
	subjects := map[string]string{}
	for _, m := range ms {
		k := m.Header.Get(queue.HeaderKey)
		if string(m.Data) != k {
			t.Errorf("delivery for Shaper-Key %q carries %q", k, m.Data)
		}
		if other, dup := subjects[m.Subject]; dup {
			t.Errorf("keys %q and %q share subject %s", other, k, m.Subject)
		}
		subjects[m.Subject] = k
		if strings.Count(m.Subject, ".") != 3 {
			t.Errorf("key %q delivered on %s: not one token", k, m.Subject)
		}
	}
	for _, tc := range []struct {
		name, policy, key string
		size              int
		want              int
	}{
		{"300-byte key", "p", strings.Repeat("k", 300), 1, http.StatusBadRequest},
		{"10 KB key", "p", strings.Repeat("é", 5000), 1, http.StatusBadRequest},
		{"unknown policy", "nope", "k", 1, http.StatusNotFound},
		{"4 MiB payload", "p", "k", 4 << 20, http.StatusRequestEntityTooLarge},
		{"1 MiB + 1 payload", "p", "k", 1<<20 + 1, http.StatusRequestEntityTooLarge},
	} {
		a := r.post(t, tc.policy, tc.key, make([]byte, tc.size))
		if a.code != tc.want {
			t.Errorf("%s: POST = %d %v, want %d", tc.name, a.code, a.body, tc.want)
		}
		if a.body["detail"] == nil || a.body["detail"] == "" {
			t.Errorf("%s: problem %v has no detail", tc.name, a.body)
		}
	}
	if a := r.post(t, "p", "big", make([]byte, 1<<20)); a.code != http.StatusAccepted {
		t.Errorf("a payload of exactly 1 MiB = %d %v, want 202", a.code, a.body)
	}
	// Nothing was queued by the bad submissions.
	time.Sleep(100 * time.Millisecond)
	for _, st := range r.Status() {
		if st.Admitted != uint64(len(keys))+1 {
			t.Errorf("policy %s admitted %d, want %d", st.Name, st.Admitted, len(keys)+1)
		}
	}
}

func TestNATSSubmit(t *testing.T) {
	r := start(t, burstPolicy)
	wait := collect(t, r.nc, "shaper.out.burst.>")
	reply := func(subject string, hdr nats.Header) map[string]any {
		t.Helper()
		m, err := r.nc.RequestMsg(&nats.Msg{Subject: subject, Data: []byte("n"), Header: hdr}, 5*time.Second)
		if err != nil {
			t.Fatalf("request %s: %v", subject, err)
		}
		var body map[string]any
		if err := json.Unmarshal(m.Data, &body); err != nil {
			t.Fatalf("reply %q: %v", m.Data, err)
		}
		return body
	}
	if b := reply("shaper.submit.burst.plain", nil); b["status"] != "queued" || b["id"] == "" || b["key"] != "plain" {
		t.Errorf("NATS submit = %v, want queued with an id", b)
	}
	tok, _ := queue.EncodeKey("a.b c")
	if b := reply("shaper.submit.burst."+tok, nats.Header{"Shaper-Key": []string{"a.b c"}}); b["status"] != "queued" || b["key"] != "a.b c" {
		t.Errorf("NATS submit with hostile key = %v, want queued for key \"a.b c\"", b)
	}
	if b := reply("shaper.submit.burst.other", nats.Header{"Shaper-Key": []string{"a.b c"}}); b["status"] != "error" || b["code"] != 400.0 ||
		b["error"] != `the Shaper-Key header "a.b c" does not match the subject's key token "other": that key's subject is shaper.submit.burst.`+tok {
		t.Errorf("NATS submit with mismatched Shaper-Key = %v, want error 400 naming the key's subject", b)
	}
	// A token that is no key's encoding says what a token is, and the
	// subject of the key it spells.
	pct, _ := queue.EncodeKey("a%2Fb")
	if b, _ := reply("shaper.submit.burst.a%2Fb", nil)["error"].(string); !strings.Contains(b, "a token is a key of [A-Za-z0-9_-] as it is") ||
		!strings.HasSuffix(b, `key "a%2Fb" is shaper.submit.burst.`+pct) {
		t.Errorf("NATS submit with token a%%2Fb = %q, want what a token is and the key's subject", b)
	}
	if b := reply("shaper.submit.nope.k", nil); b["code"] != 404.0 {
		t.Errorf("NATS submit to unknown policy = %v, want 404", b)
	}
	var statuses []string
	for range 12 {
		statuses = append(statuses, reply("shaper.submit.burst.full", nil)["status"].(string))
	}
	if statuses[0] != "queued" || statuses[11] != "rejected" {
		t.Errorf("12 NATS submissions to a queue of 10 = %v, want queued … rejected", statuses)
	}
	ms := wait(12, 10*time.Second) // plain, "a.b c" and 10 of full
	keys := map[string]bool{}
	for _, m := range ms {
		keys[m.Header.Get(queue.HeaderKey)] = true
	}
	if !keys["plain"] || !keys["a.b c"] {
		t.Errorf("delivered keys %v, want plain and \"a.b c\"", keys)
	}
}

func TestIdempotencyKey(t *testing.T) {
	r := start(t, burstPolicy)
	a1 := r.post(t, "burst", "k", []byte("x"), "Idempotency-Key", "order-1")
	a2 := r.post(t, "burst", "k", []byte("x"), "Idempotency-Key", "order-1")
	a3 := r.post(t, "burst", "k", []byte("x"), "Idempotency-Key", "order-2")
	if a1.code != 202 || a2.code != 202 || a1.body["id"] != a2.body["id"] || a2.body["duplicate"] != true {
		t.Errorf("resubmission: %d %v then %d %v, want 202 with the same id, the second a duplicate", a1.code, a1.body, a2.code, a2.body)
	}
	if a3.body["id"] == a1.body["id"] {
		t.Errorf("another Idempotency-Key got the same id %v", a3.body["id"])
	}
	st := r.Status()[0]
	if st.Admitted != 2 || st.Duplicates != 1 {
		t.Errorf("status admitted %d duplicates %d, want 2 and 1", st.Admitted, st.Duplicates)
	}
}

// A resubmission under the Idempotency-Key of a job delivered since is
// answered with its id and what its key holds now: nothing.
func TestIdempotencyKeyAfterDelivery(t *testing.T) {
	r := start(t, burstPolicy)
	got := collect(t, r.nc, "shaper.out.burst.done")
	a1 := r.post(t, "burst", "done", []byte("x"), "Idempotency-Key", "order-1")
	got(1, 10*time.Second)
	waitFor(t, "the job delivered", 10*time.Second, func() bool {
		resp, err := http.Get(r.base + "/v1/jobs/" + a1.body["id"].(string))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var rec map[string]any
		json.NewDecoder(resp.Body).Decode(&rec)
		return rec["status"] == "delivered"
	})
	a2 := r.post(t, "burst", "done", []byte("x"), "Idempotency-Key", "order-1")
	if a2.code != 202 || a2.body["id"] != a1.body["id"] || a2.body["duplicate"] != true || a2.body["queued"] != 0.0 || a2.body["eta_ms"] != 0.0 {
		t.Errorf("resubmission after delivery = %d %v, want 202, the same id, a duplicate, queued 0 and eta_ms 0", a2.code, a2.body)
	}
}

func TestJetStreamUnavailable(t *testing.T) {
	ns := testenv.NATS(t)
	r := start(t, burstPolicy, func(c *shaper.Config) {
		c.NATSURL = ns.ClientURL()
		c.Timeout = 500 * time.Millisecond
	})
	if a := r.post(t, "burst", "k", []byte("x")); a.code != 202 {
		t.Fatalf("POST = %d, want 202", a.code)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	start := time.Now()
	a := r.post(t, "burst", "k", []byte("x"))
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Errorf("POST with JetStream down = %d %v (Retry-After %q), want 503 with Retry-After", a.code, a.body, a.header.Get("Retry-After"))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("POST with JetStream down took %v, want a prompt answer", d)
	}
	resp, err := http.Get(r.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz with JetStream down = %d, want 503", resp.StatusCode)
	}
}

func TestPoliciesEndpoint(t *testing.T) {
	r := start(t, burstPolicy)
	r.post(t, "burst", "k", []byte("x"))
	resp, err := http.Get(r.base + "/v1/policies")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Policies []map[string]any `json:"policies"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if len(body.Policies) != 1 {
		t.Fatalf("policies = %v", body.Policies)
	}
	p := body.Policies[0]
	for _, f := range []string{"name", "outflow", "queue", "overflow", "keys", "queued", "admitted", "rejected", "delivered"} {
		if _, ok := p[f]; !ok {
			t.Errorf("policy status lacks %q: %v", f, p)
		}
	}
	if p["outflow"] != "20/s" || p["admitted"] != 1.0 {
		t.Errorf("policy status = %v, want outflow 20/s, admitted 1", p)
	}
	for _, path := range []string{"/healthz", "/readyz", "/v1/policies/burst", "/metrics"} {
		resp, err := http.Get(r.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d, want 200", path, resp.StatusCode)
		}
	}
	resp, err = http.Get(r.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{`shaper_jobs_admitted_total{policy="burst"} 1`, `shaper_jobs_dead{policy="burst"} 0`,
		`shaper_draining{policy="burst"} 1`, `shaper_jobs_deferred_queued{policy="burst"} 0`,
		`shaper_nats_ingress_pending 0`, `shaper_nats_ingress_dropped_total 0`,
		`shaper_total_per_second{policy="burst"} 0`, `shaper_concurrency_key{policy="burst"} 1`, `shaper_concurrency_total{policy="burst"} 0`} {
		if !strings.Contains(string(metrics), line+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", line, metrics)
		}
	}
	resp, _ = http.Get(r.base + "/v1/policies/nope")
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("GET /v1/policies/nope = %d, want 404", resp.StatusCode)
	}
}

func TestDataDirectoryIsLocked(t *testing.T) {
	dir := t.TempDir()
	set := testenv.Policies(t, "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n")
	first := testenv.Shaper(t, shaper.Config{Policies: set, DataDir: dir})
	second, err := shaper.New(shaper.Config{Policies: set, DataDir: dir, HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = second.Run(ctx)
	var ce *shaper.ConfigError
	if !errors.As(err, &ce) || ce.Field != "DataDir" || !strings.Contains(err.Error(), fmt.Sprint("pid ", os.Getpid())) || !strings.Contains(err.Error(), first.HTTPAddr()) {
		t.Fatalf("second shaper on the same data directory: Run = %v, want a DataDir error naming pid %d and %s", err, os.Getpid(), first.HTTPAddr())
	}
	// The first one is untouched.
	if a := wrap(t, first).post(t, "p", "k", []byte("x")); a.code != http.StatusAccepted {
		t.Errorf("first shaper after the refused second: POST = %d, want 202", a.code)
	}
}

// A Redis address without its scheme (a tour passed 127.0.0.1:6379) is
// refused before anything starts, with the URL it meant.
func TestRedisURLWithoutScheme(t *testing.T) {
	s, err := shaper.New(shaper.Config{Policies: testenv.Policies(t, "policies:\n  - {name: p, outflow: 5/s, queue: 3}\n"), DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:-1", RedisURL: "127.0.0.1:6379"})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = s.Run(ctx)
	}
	var ce *shaper.ConfigError
	if !errors.As(err, &ce) || ce.Field != "RedisURL" || !strings.Contains(err.Error(), `did you mean "redis://127.0.0.1:6379"?`) {
		t.Fatalf("RedisURL 127.0.0.1:6379: %v, want a RedisURL error suggesting redis://127.0.0.1:6379", err)
	}
}

// A job deferred under an Idempotency-Key, submitted again: the same
// deferred 429, its id, and "duplicate": true, over HTTP and over NATS;
// nothing new is kept.
func TestIdempotencyKeyOfADeferredJob(t *testing.T) {
	r := start(t, "policies:\n  - {name: d, outflow: 1/m, queue: 1, overflow: defer}\n")
	r.post(t, "d", "k", []byte("fills"))
	a1 := r.post(t, "d", "k", []byte("x"), "Idempotency-Key", "order-1")
	a2 := r.post(t, "d", "k", []byte("x"), "Idempotency-Key", "order-1")
	if a1.code != 429 || a1.body["deferred"] != true || a1.body["duplicate"] != nil ||
		a2.code != 429 || a2.body["deferred"] != true || a2.body["id"] != a1.body["id"] || a2.body["duplicate"] != true {
		t.Errorf("a deferred job resubmitted: %d %v then %d %v, want deferred 429s with one id, the second a duplicate", a1.code, a1.body, a2.code, a2.body)
	}
	m, err := r.nc.RequestMsg(&nats.Msg{Subject: "shaper.submit.d.k", Data: []byte("x"), Header: nats.Header{"Idempotency-Key": {"order-1"}}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply map[string]any
	json.Unmarshal(m.Data, &reply)
	if reply["status"] != "deferred" || reply["id"] != a1.body["id"] || reply["duplicate"] != true {
		t.Errorf("the same over NATS: %v, want deferred, the same id, a duplicate", reply)
	}
	if st := r.Status()[0]; st.DeferQueued != 1 {
		t.Errorf("deferred jobs kept: %d, want 1", st.DeferQueued)
	}
}
