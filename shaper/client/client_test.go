package client_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// testPolicies gives every outcome a policy: open accepts, tight is full
// after one job for an hour, later defers, admit limits to one job per key
// an hour, pace frees a slot every 2 s.
const testPolicies = `
policies:
  - name: open
    outflow: 1000/s
    queue: 1000
  - name: tight
    outflow: 1/h
    queue: 1
  - name: later
    outflow: 1/h
    queue: 1
    overflow: defer
  - name: admit
    outflow: 1000/s
    queue: 1000
    admit: {algorithm: fixed_window, limit: 1/h}
  - name: pace
    outflow: 1/2s
    queue: 1
`

// maxPayload is the test shaper's payload limit.
const maxPayload = 4096

// env is a real Shaper (embedded JetStream on random ports) with a Client
// of its HTTP API and a NATS submitter on its JetStream server.
type env struct {
	s    *testenv.Running
	base string
	c    *client.Client
	n    *client.NATS
	nc   *nats.Conn
}

func start(t *testing.T, yaml string) *env {
	t.Helper()
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, yaml), MaxPayload: maxPayload})
	testenv.Consume(t, s.NATSURL(), "shaper.out.>")
	e := &env{s: s, base: "http://" + s.HTTPAddr()}
	var err error
	if e.c, err = client.New(e.base, client.Config{}); err != nil {
		t.Fatal(err)
	}
	if e.nc, err = nats.Connect(s.NATSURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	if e.n, err = client.NewNATS(e.nc, client.NATSConfig{}); err != nil {
		t.Fatal(err)
	}
	return e
}

// submitter is what Client and NATS have in common, so that one table of
// cases runs over both.
type submitter interface {
	Submit(ctx context.Context, policy, key string, payload []byte, opts ...client.SubmitOption) (client.Result, error)
}

var (
	_ submitter = (*client.Client)(nil)
	_ submitter = (*client.NATS)(nil)
)

func (e *env) submitters() []struct {
	name string
	sub  submitter
} {
	return []struct {
		name string
		sub  submitter
	}{{"http", e.c}, {"nats", e.n}}
}

func mustSubmit(t *testing.T, s submitter, policy, key string, want client.Outcome, opts ...client.SubmitOption) client.Result {
	t.Helper()
	res, err := s.Submit(t.Context(), policy, key, []byte("payload of "+key), opts...)
	if err != nil {
		t.Fatalf("Submit(%s, %q): %v", policy, key, err)
	}
	if res.Outcome != want {
		t.Fatalf("Submit(%s, %q) = %+v, want outcome %v", policy, key, res, want)
	}
	return res
}

// fillTight fills key of policy tight for an hour: a delivered job holds
// its slot for at most a second, so the second job, taken once that slot
// frees, is the one that waits an hour.
func fillTight(t *testing.T, s submitter, key string) {
	t.Helper()
	mustSubmit(t, s, "tight", key, client.OutcomeAccepted)
	res := mustSubmit(t, s, "tight", key, client.OutcomeAccepted, client.WithRetry(30*time.Second))
	if res.ETA < 30*time.Minute {
		t.Fatalf("the second job of a tight key: %+v, want it to wait about an hour", res)
	}
}

// Every outcome a producer acts on, over HTTP and NATS.
func TestSubmitOutcomes(t *testing.T) {
	e := start(t, testPolicies)
	for _, tr := range e.submitters() {
		t.Run(tr.name, func(t *testing.T) {
			s := tr.sub
			key := tr.name + "-key"

			res := mustSubmit(t, s, "open", key, client.OutcomeAccepted)
			if res.ID == "" || res.Policy != "open" || res.Key != key || res.Queued < 1 || res.Attempts != 1 || res.Duplicate {
				t.Errorf("accepted: %+v, want an id, open, %q, queued ≥ 1, 1 attempt, no duplicate", res, key)
			}
			if j, err := e.c.Job(t.Context(), res.ID); err != nil || j.ID != res.ID ||
				!(j.Status == client.JobQueued && j.Key == key || j.Status == client.JobDelivered) {
				t.Errorf("Job(%s) = %+v, %v; want it queued or delivered, of key %q", res.ID, j, err, key)
			}

			first := mustSubmit(t, s, "open", key+"-idem", client.OutcomeAccepted, client.WithIdempotencyKey("order-1"))
			again := mustSubmit(t, s, "open", key+"-idem", client.OutcomeAccepted, client.WithIdempotencyKey("order-1"))
			if !again.Duplicate || again.ID != first.ID {
				t.Errorf("resubmitted with the same idempotency key: %+v, want duplicate of %s", again, first.ID)
			}

			fillTight(t, s, key)
			full := mustSubmit(t, s, "tight", key, client.OutcomeRejected)
			if full.ID != "" || full.RetryAfter < 30*time.Minute || full.RetryAfter > time.Hour || !strings.Contains(full.Detail, "full") {
				t.Errorf("full key: %+v, want no id, retry after about 1h, a detail saying full", full)
			}

			mustSubmit(t, s, "later", key, client.OutcomeAccepted)
			deferred := mustSubmit(t, s, "later", key, client.OutcomeDeferred)
			if deferred.ID == "" || deferred.RetryAfter <= 0 {
				t.Errorf("deferred: %+v, want its id and when it runs", deferred)
			}
			if j, err := e.c.Job(t.Context(), deferred.ID); err != nil || j.Status != client.JobDeferred || j.Key != key {
				t.Errorf("Job(%s) of a deferred job = %+v, %v; want deferred, key %q", deferred.ID, j, err, key)
			}
			kept := mustSubmit(t, s, "later", key, client.OutcomeDeferred, client.WithIdempotencyKey("late-1"))
			keptAgain := mustSubmit(t, s, "later", key, client.OutcomeDeferred, client.WithIdempotencyKey("late-1"))
			if kept.Duplicate || !keptAgain.Duplicate || keptAgain.ID != kept.ID {
				t.Errorf("a deferred job resubmitted: %+v then %+v, want the second a duplicate of the first's id", kept, keptAgain)
			}

			mustSubmit(t, s, "admit", key, client.OutcomeAccepted)
			limited := mustSubmit(t, s, "admit", key, client.OutcomeLimited)
			if limited.ID != "" || limited.RetryAfter <= 0 || limited.RetryAfter > time.Hour {
				t.Errorf("limited: %+v, want no id and a retry after of at most 1h", limited)
			}

			tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			mustSubmit(t, s, "open", key+"-trace", client.OutcomeAccepted, client.WithTraceparent(tp))
		})
	}
}

// Answers that are errors: each is an *Error matched by its sentinel.
func TestSubmitErrors(t *testing.T) {
	e := start(t, testPolicies)
	for _, tr := range e.submitters() {
		t.Run(tr.name, func(t *testing.T) {
			// A key that makes no subject token is refused before asking.
			badKey := 400
			if tr.name == "nats" {
				badKey = 0
			}
			for _, c := range []struct {
				name, policy, key string
				payload           []byte
				want              error
				code              int // of the shaper's answer; 0: refused before asking
			}{
				{"unknown policy", "nope", "k", nil, client.ErrUnknownPolicy, 404},
				{"key too long", "open", strings.Repeat("k", 257), nil, client.ErrBadRequest, badKey},
				{"key not UTF-8", "open", "\xff", nil, client.ErrBadRequest, badKey},
				{"payload too large", "open", "k", bytes.Repeat([]byte("x"), maxPayload+1), client.ErrTooLarge, 413},
				{"empty policy", "", "k", nil, client.ErrUnknownPolicy, 0},
			} {
				res, err := tr.sub.Submit(t.Context(), c.policy, c.key, c.payload)
				if !errors.Is(err, c.want) {
					t.Errorf("%s: Submit = %+v, %v; want %v", c.name, res, err, c.want)
					continue
				}
				var ae *client.Error
				if c.code == 0 {
					if errors.As(err, &ae) {
						t.Errorf("%s: %v is an answer of the shaper, want it refused before asking", c.name, err)
					}
					continue
				}
				if !errors.As(err, &ae) || ae.StatusCode != c.code || ae.Problem.Status != c.code || ae.Problem.Detail == "" {
					t.Errorf("%s: error %#v, want an *Error with status %d and a detail", c.name, ae, c.code)
				}
				if c.code == 404 && !errors.Is(err, client.ErrNotFound) {
					t.Errorf("%s: %v is not ErrNotFound", c.name, err)
				}
			}
		})
	}
	// An empty key is a segment HTTP can send (and the shaper refuses),
	// and a token NATS cannot make.
	if _, err := e.c.Submit(t.Context(), "open", "", nil); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("HTTP Submit with an empty key: %v, want ErrBadRequest", err)
	}
	if _, err := e.n.Submit(t.Context(), "open", "", nil); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("NATS Submit with an empty key: %v, want ErrBadRequest", err)
	}
}

// WithRetry waits a refusal's Retry-After and submits again; it stops at
// its bound and at ctx's deadline, and never resubmits a deferred job.
func TestSubmitRetry(t *testing.T) {
	e := start(t, testPolicies)
	for _, tr := range e.submitters() {
		t.Run(tr.name, func(t *testing.T) {
			s, key := tr.sub, tr.name+"-retry"
			mustSubmit(t, s, "pace", key, client.OutcomeAccepted)
			start := time.Now()
			refused := mustSubmit(t, s, "pace", key, client.OutcomeRejected)
			res := mustSubmit(t, s, "pace", key, client.OutcomeAccepted, client.WithRetry(30*time.Second))
			took := time.Since(start)
			// The slot frees RetryAfter (rounded up to a millisecond) after
			// the refusal, which came after start.
			if res.Attempts < 2 || took < refused.RetryAfter-5*time.Millisecond || took > refused.RetryAfter+20*time.Second {
				t.Errorf("with retry: %d attempts, accepted %v after a refusal saying retry after %v; want ≥ 2 attempts, not before",
					res.Attempts, took, refused.RetryAfter)
			}

			// The bound: a key full for an hour is not waited for.
			fillTight(t, s, key)
			start = time.Now()
			res = mustSubmit(t, s, "tight", key, client.OutcomeRejected, client.WithRetry(time.Minute))
			// (A refusal just after a job was admitted may say 1 ms, before
			// the shaper's drainer has seen the job: then a second try.)
			if took := time.Since(start); res.RetryAfter < time.Minute || took > 10*time.Second {
				t.Errorf("retry within 1m of a key full for 1h: %+v after %v, want the refusal at once", res, took)
			}

			// ctx ending while waiting: the last refusal, with ctx's error.
			mustSubmit(t, s, "pace", key+"-cancel", client.OutcomeAccepted)
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(500*time.Millisecond, cancel) // the refusal comes sooner, the slot frees later (2 s)
			res, err := s.Submit(ctx, "pace", key+"-cancel", nil, client.WithRetry(time.Minute))
			if res.Outcome != client.OutcomeRejected || !errors.Is(err, context.Canceled) {
				t.Errorf("retry cancelled while waiting = %+v, %v; want the refusal and context.Canceled", res, err)
			}

			// A deferred job is kept: never sent again.
			mustSubmit(t, s, "later", key, client.OutcomeAccepted)
			res = mustSubmit(t, s, "later", key, client.OutcomeDeferred, client.WithRetry(time.Minute))
			if res.Attempts != 1 {
				t.Errorf("deferred with retry: %d attempts, want 1", res.Attempts)
			}
		})
	}
}

// Keys that a naive URL or subject would mangle arrive as they are, over
// HTTP and NATS, and the job's record names them.
func TestHostileKeys(t *testing.T) {
	e := start(t, testPolicies)
	keys := []string{
		"a/b", "..", ".", "...", "%", "%2F", "%2E%2E", "a b", " lead", "trail ", "é", "ü/..", "../..", "a//b", "/",
		"a.b", "*", ">", "$SYS.x", "\x00nul", "\r\nInjected: 1", "?q=1#f", "~YS5i", "-", "\t", "+", ";x=1",
		strings.Repeat("é", 128),
	}
	for _, tr := range e.submitters() {
		for _, key := range keys {
			res, err := tr.sub.Submit(t.Context(), "open", key, []byte("x"))
			if err != nil || res.Outcome != client.OutcomeAccepted || res.Key != key {
				t.Errorf("%s: Submit(open, %q) = %+v, %v; want accepted for that key", tr.name, key, res, err)
				continue
			}
			// A queued job names its key; a delivered one is known by its
			// absence from the queue, without a record of its own.
			j, err := e.c.Job(t.Context(), res.ID)
			if err != nil || (j.Key != key && !(j.Status == client.JobDelivered && j.Key == "")) {
				t.Errorf("%s: Job(%s) of key %q = %+v, %v", tr.name, res.ID, key, j, err)
			}
		}
	}
	// Ids and names are escaped the same way: no route is reached by them.
	for _, id := range []string{"..", ".", "a/b", "%", "?x"} {
		if _, err := e.c.Job(t.Context(), id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("Job(%q): %v, want ErrNotFound", id, err)
		}
		if _, err := e.c.Policy(t.Context(), id); !errors.Is(err, client.ErrUnknownPolicy) {
			t.Errorf("Policy(%q): %v, want ErrUnknownPolicy", id, err)
		}
	}
}

// The bearer token and User-Agent go with every request.
func TestConfigHeaders(t *testing.T) {
	e := start(t, testPolicies)
	seen := make(chan http.Header, 16)
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		e.s.Handler().ServeHTTP(w, r)
	})
	srv := newServer(t, front)
	c, err := client.New(srv+"/", client.Config{Token: "s3cret", UserAgent: "test-agent/1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(t.Context(), "open", "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policies(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		h := <-seen
		if h.Get("Authorization") != "Bearer s3cret" || h.Get("User-Agent") != "test-agent/1" {
			t.Errorf("request headers %v, want the bearer token and the user agent", h)
		}
	}
}

func TestNewRefusesBadBaseURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://", "http://x/?q=1", "http://x/#f", "http://%zz"} {
		if _, err := client.New(u, client.Config{}); err == nil {
			t.Errorf("New(%q): no error", u)
		}
	}
	if _, err := client.NewNATS(nil, client.NATSConfig{}); err == nil {
		t.Error("NewNATS(nil): no error")
	}
}
