package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
)

// newServer serves h on a random port until the test ends and returns its
// base URL.
func newServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// startDeadHooks starts a shaper with testPolicies and a policy hooks
// whose webhook fails every delivery, tried once, and submits a job to
// hooks on each of keys: each turns into a dead letter.
func startDeadHooks(t *testing.T, keys ...string) *env {
	t.Helper()
	hook := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError) // every delivery fails
	}))
	e := start(t, testPolicies+fmt.Sprintf(`
  - name: hooks
    outflow: 100/s
    queue: 10
    retry: {attempts: 1, backoff: 10ms, max_backoff: 10ms}
    deliver: {webhook: %q}
`, hook))
	for _, k := range keys {
		mustSubmit(t, e.c, "hooks", k, client.OutcomeAccepted)
	}
	return e
}

func TestPolicies(t *testing.T) {
	e := start(t, testPolicies)
	ctx := t.Context()

	all, err := e.c.Policies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range all {
		names = append(names, p.Name)
	}
	if want := []string{"admit", "later", "open", "pace", "tight"}; !slices.Equal(names, want) {
		t.Errorf("Policies = %q, want %q", names, want)
	}

	mustSubmit(t, e.c, "open", "figures", client.OutcomeAccepted)
	p, err := e.c.Policy(ctx, "open")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "open" || p.Outflow.String() != "1000/s" || p.Queue != 1000 || p.Admitted != 1 || p.Override {
		t.Errorf("Policy(open) = %+v, want open, 1000/s, queue 1000, 1 admitted, no override", p)
	}
	if _, err := e.c.Policy(ctx, "nope"); !errors.Is(err, client.ErrUnknownPolicy) || !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Policy(nope): %v, want ErrUnknownPolicy and ErrNotFound", err)
	}

	rate, _ := policies.ParseRate("9/s")
	total, _ := policies.ParseRate("100/s")
	p, err = e.c.SetPolicy(ctx, "open", client.PolicyChange{
		Outflow:  policies.Value(rate),
		Queue:    policies.Value(7),
		Overflow: policies.Value(policies.OverflowDefer),
		Total:    policies.Value(total),
		Retry:    policies.Value(policies.RetryPatch{Attempts: policies.Value(3)}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Outflow != rate || p.Queue != 7 || p.Overflow != policies.OverflowDefer || p.Total != total || p.Retry.Attempts != 3 || !p.Override ||
		strings.Join(p.Overridden, " ") != "outflow queue overflow total retry.attempts" {
		t.Errorf("SetPolicy = %+v, want 9/s, queue 7, defer, total 100/s, 3 attempts, override of those", p)
	}
	if p, err = e.c.SetPolicy(ctx, "open", client.PolicyChange{Total: policies.Value(policies.Rate{})}); err != nil || !p.Total.IsZero() || p.Queue != 7 {
		t.Errorf("SetPolicy(total: zero) = total %v, queue %d, %v; want the cap removed, the rest kept", p.Total, p.Queue, err)
	}
	// A reset takes one field back to the file's, and leaves the rest.
	if p, err = e.c.SetPolicy(ctx, "open", client.PolicyChange{Queue: policies.Null[int]()}); err != nil || p.Queue != 1000 || p.Outflow != rate {
		t.Errorf("SetPolicy(queue: null) = queue %d, outflow %v, %v; want the file's 1000 and 9/s kept", p.Queue, p.Outflow, err)
	}
	if _, err := e.c.SetPolicy(ctx, "open", client.PolicyChange{Overflow: policies.Value(policies.Overflow("sideways"))}); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("SetPolicy(overflow sideways): %v, want ErrBadRequest", err)
	}
	if _, err := e.c.SetPolicy(ctx, "nope", client.PolicyChange{Queue: policies.Value(7)}); !errors.Is(err, client.ErrUnknownPolicy) {
		t.Errorf("SetPolicy(nope): %v, want ErrUnknownPolicy", err)
	}
	if p, err = e.c.ResetPolicy(ctx, "open"); err != nil || p.Outflow.String() != "1000/s" || p.Queue != 1000 || p.Override {
		t.Errorf("ResetPolicy(open) = %+v, %v; want the file's policy", p, err)
	}
	if _, err := e.c.ResetPolicy(ctx, "nope"); !errors.Is(err, client.ErrUnknownPolicy) {
		t.Errorf("ResetPolicy(nope): %v, want ErrUnknownPolicy", err)
	}
	// A name the client refuses itself is ErrNotFound too, as the shaper's
	// 404 is (a tour's errors.Is(err, ErrNotFound) missed these).
	if _, err := e.c.Policy(ctx, ""); !errors.Is(err, client.ErrUnknownPolicy) || !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Policy(\"\"): %v, want ErrUnknownPolicy and ErrNotFound", err)
	}
	for _, name := range []string{"", "or.ders", "*"} {
		if _, err := e.n.Submit(ctx, name, "k", nil); !errors.Is(err, client.ErrUnknownPolicy) || !errors.Is(err, client.ErrNotFound) {
			t.Errorf("NATS.Submit(%q): %v, want ErrUnknownPolicy and ErrNotFound", name, err)
		}
	}
}

func TestHealthAndReady(t *testing.T) {
	e := start(t, testPolicies)
	if h, err := e.c.Health(t.Context()); err != nil || h.Status != "ok" {
		t.Errorf("Health = %+v, %v; want ok", h, err)
	}
	if err := e.c.Ready(t.Context()); err != nil {
		t.Errorf("Ready: %v", err)
	}
	e.s.Stop()
	err := e.c.Ready(t.Context())
	var ae *client.Error
	if err == nil || errors.As(err, &ae) {
		t.Errorf("Ready of a stopped shaper: %v, want a transport error", err)
	}
}

// Dead letters: listed, shown with their payload, replayed, purged; each
// filter error is the sentinel it should be.
func TestDeadLetters(t *testing.T) {
	keys := []string{"a/b", ".."}
	e := startDeadHooks(t, keys...)
	ctx := t.Context()
	var dead []client.DeadLetter
	for deadline := time.Now().Add(20 * time.Second); len(dead) < len(keys); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("DeadLetters = %+v after 20s, want %d", dead, len(keys))
		}
		var err error
		if dead, err = e.c.DeadLetters(ctx, client.DeadFilter{Policy: "hooks"}); err != nil {
			t.Fatal(err)
		}
	}
	i := slices.IndexFunc(dead, func(d client.DeadLetter) bool { return d.Key == "a/b" })
	if i < 0 {
		t.Fatalf("DeadLetters = %+v, none of key a/b", dead)
	}
	d := dead[i]
	if d.Policy != "hooks" || d.Key != "a/b" || d.Reason != "delivery" || d.From != "queue" || d.ID == "" || d.Seq == 0 || d.Data() != nil {
		t.Errorf("dead letter of a/b = %+v, want hooks, a/b, dead by delivery, from the queue, without its payload", d)
	}
	if got, err := e.c.DeadLetters(ctx, client.DeadFilter{Key: "..", Reason: "delivery"}); err != nil || len(got) != 1 || got[0].Key != ".." {
		t.Errorf("DeadLetters(key .., reason delivery) = %+v, %v; want the one of key ..", got, err)
	}
	if got, err := e.c.DeadLetters(ctx, client.DeadFilter{Policy: "hooks", Limit: 1}); err != nil || len(got) != 1 {
		t.Errorf("DeadLetters(limit 1) = %d, %v; want 1", len(got), err)
	}
	shown, err := e.c.DeadLetter(ctx, "hooks", d.Seq)
	if err != nil || string(shown.Data()) != "payload of a/b" || shown.ID != d.ID {
		t.Errorf("DeadLetter(hooks, %d) = %+v, %v; want its payload", d.Seq, shown, err)
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"DeadLetter of an unknown seq", second(e.c.DeadLetter(ctx, "hooks", 999)), client.ErrNotFound},
		{"DeadLetter of an unknown policy", second(e.c.DeadLetter(ctx, "nope", 1)), client.ErrNotFound},
		{"DeadLetters of an unknown policy", second(e.c.DeadLetters(ctx, client.DeadFilter{Policy: "nope"})), client.ErrUnknownPolicy},
		{"DeadLetters with a bad reason", second(e.c.DeadLetters(ctx, client.DeadFilter{Reason: "bogus"})), client.ErrBadRequest},
		{"ReplayDead of an unknown policy", second(e.c.ReplayDead(ctx, client.DeadFilter{Policy: "nope"})), client.ErrUnknownPolicy},
		{"PurgeDead with a bad key", second(e.c.PurgeDead(ctx, client.DeadFilter{Policy: "hooks", Key: "\xff"})), client.ErrBadRequest},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}

	rep, err := e.c.ReplayDead(ctx, client.DeadFilter{Policy: "hooks", Key: "a/b"})
	if err != nil || rep.Matched != 1 || rep.Done != 1 || len(rep.Results) != 1 || rep.Results[0].NewID == "" || rep.Results[0].ID != d.ID {
		t.Errorf("ReplayDead(a/b) = %+v, %v; want 1 replayed as a new job", rep, err)
	}
	rep, err = e.c.PurgeDead(ctx, client.DeadFilter{Policy: "hooks", Key: ".."})
	if err != nil || rep.Matched != 1 || rep.Done != 1 {
		t.Errorf("PurgeDead(..) = %+v, %v; want 1 purged", rep, err)
	}
	if got, err := e.c.DeadLetters(ctx, client.DeadFilter{Key: ".."}); err != nil || len(got) != 0 {
		t.Errorf("DeadLetters(..) after the purge = %+v, %v; want none", got, err)
	}
}

func second[T any](_ T, err error) error { return err }

// A NATS request nobody answers, and a reply that is not the contract's.
func TestNATSFailures(t *testing.T) {
	e := start(t, testPolicies)
	n, err := client.NewNATS(e.nc, client.NATSConfig{SubmitSubject: "nobody.home", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Submit(t.Context(), "open", "k", nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("Submit with no shaper listening: %v, want nats.ErrNoResponders", err)
	}
	sub, err := e.nc.Subscribe("odd.>", func(m *nats.Msg) { m.Respond([]byte(`{"status":"maybe"}`)) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	odd, _ := client.NewNATS(e.nc, client.NATSConfig{SubmitSubject: "odd"})
	if _, err := odd.Submit(t.Context(), "open", "k", nil); !errors.Is(err, client.ErrBadAnswer) {
		t.Errorf("Submit answered with an unknown status: %v, want ErrBadAnswer", err)
	}
	if _, err := e.n.Submit(t.Context(), "a.b", "k", nil); !errors.Is(err, client.ErrUnknownPolicy) {
		t.Errorf("Submit to policy a.b: %v, want ErrUnknownPolicy before any request", err)
	}
	// A payload over the server's max_payload is refused before it leaves,
	// as the shaper's own 413 is: ErrTooLarge, and nats.go's error too.
	big := make([]byte, e.nc.MaxPayload()+1)
	if _, err := e.n.Submit(t.Context(), "open", "k", big); !errors.Is(err, client.ErrTooLarge) || !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("Submit of %d bytes: %v, want ErrTooLarge and nats.ErrMaxPayload", len(big), err)
	}
}
