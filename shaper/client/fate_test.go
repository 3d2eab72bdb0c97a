package client_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// WithRetry also submits again after a failure that leaves the job's fate
// unknown: here no shaper answers yet (a connection refused over HTTP, no
// responders over NATS), as while one restarts; a tour's producer got 215
// such errors in a kill -9 and had to resubmit by hand. Each Submit sends
// an idempotency key of its own, so two jobs are never taken for one.
func TestSubmitRetryUnknownFate(t *testing.T) {
	ns := testenv.NATS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the shaper starts
	c, err := client.New("http://"+addr, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := client.NewNATS(testenv.Connect(t, ns), client.NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// Without WithRetry the failure is returned at once.
	if _, err := c.Submit(t.Context(), "open", "k", []byte("x")); err == nil {
		t.Fatal("Submit with no shaper: no error")
	}
	type answer struct {
		res client.Result
		err error
	}
	answers := make(chan answer, 4)
	for _, s := range []submitter{c, n, c, n} {
		go func() {
			res, err := s.Submit(t.Context(), "open", "k", []byte("x"), client.WithRetry(20*time.Second))
			answers <- answer{res, err}
		}()
	}
	time.Sleep(time.Second)
	testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, testPolicies), HTTPAddr: addr, NATSURL: ns.ClientURL()})
	ids := map[string]bool{}
	for range 4 {
		a := <-answers
		if a.err != nil || a.res.Outcome != client.OutcomeAccepted || a.res.Attempts < 2 || a.res.Duplicate {
			t.Errorf("Submit with WithRetry while no shaper answered, then one did = %+v, %v; want accepted after ≥ 2 attempts, no duplicate", a.res, a.err)
		}
		ids[a.res.ID] = true
	}
	if len(ids) != 4 {
		t.Errorf("4 submissions stored as %d jobs (%v), want 4: each has an idempotency key of its own", len(ids), ids)
	}
}

// An idempotency key a header cannot carry unchanged is refused before
// anything is sent, alike over HTTP and NATS: HTTP failed with a transport
// error, NATS stored the job under the key changed (a tour's "a\nb"), and
// " " was dropped silently, so its retries were new jobs.
func TestIdempotencyKeyRefused(t *testing.T) {
	e := start(t, testPolicies)
	for _, tr := range e.submitters() {
		for _, bad := range []string{" ", "a\nb", "a\rb", " lead", "trail\t"} {
			res, err := tr.sub.Submit(t.Context(), "open", "idem", []byte("x"), client.WithIdempotencyKey(bad))
			if !errors.Is(err, client.ErrBadRequest) || res.Outcome != 0 {
				t.Errorf("%s: Submit with idempotency key %q = %+v, %v; want ErrBadRequest, nothing sent", tr.name, bad, res, err)
			}
		}
		if _, err := tr.sub.Submit(t.Context(), "open", "idem", []byte("x"), client.WithIdempotencyKey("order 42/é")); err != nil {
			t.Errorf("%s: Submit with idempotency key %q: %v", tr.name, "order 42/é", err)
		}
		// An empty one is none, as without the option (a value passed on
		// whether or not the caller has one).
		if res, err := tr.sub.Submit(t.Context(), "open", "idem", []byte("x"), client.WithIdempotencyKey("")); err != nil || res.Duplicate {
			t.Errorf("%s: Submit with an empty idempotency key = %+v, %v; want a job of its own", tr.name, res, err)
		}
	}
	// The good key, sent over both, is one job; each empty one its own.
	if st, err := e.c.Policy(t.Context(), "open"); err != nil || st.Admitted != 3 || st.Duplicates != 1 {
		t.Errorf("jobs admitted: %d, duplicates %d, %v; want 3 and 1 (the good key over HTTP then NATS, and the 2 without a key)", st.Admitted, st.Duplicates, err)
	}
}

// A producer that submits over NATS follows its jobs over NATS too
// (NATS.Job, shaper.job.<id>), with the answer GET /v1/jobs/{id} gives: a
// tour's NATS-only producer had no way to read a job's status.
func TestNATSJob(t *testing.T) {
	e := start(t, testPolicies)
	ctx := t.Context()
	mustSubmit(t, e.n, "tight", "job", client.OutcomeAccepted) // delivered, its slot held an hour
	res := mustSubmit(t, e.n, "tight", "job2", client.OutcomeAccepted)
	waitUntil(t, "both answers alike", func() bool {
		viaNATS, err1 := e.n.Job(ctx, res.ID)
		viaHTTP, err2 := e.c.Job(ctx, res.ID)
		return err1 == nil && err2 == nil && viaNATS.Status == viaHTTP.Status && viaNATS.ID == res.ID && viaNATS.Policy == "tight"
	})
	unknown := res.ID[:strings.LastIndexByte(res.ID, '-')] + "-zzzz" // a place the queue never reached: the shaper says 404
	for _, id := range []string{unknown, "a.b", "*", ""} {
		if _, err := e.n.Job(ctx, id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("NATS.Job(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

// waitUntil waits up to 10 s for cond.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
	}
}
