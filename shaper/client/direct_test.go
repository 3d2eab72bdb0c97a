package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
)

// lanePolicies: fast drains each key at 20/s; held keeps two jobs per key
// that nobody consumes; later defers and admit limits, so their lanes are
// closed.
const lanePolicies = `
policies:
  - name: fast
    outflow: 20/s
    queue: 100
  - name: held
    outflow: 1/h
    queue: 2
    deliver: {subject: nobody.held}
  - name: later
    outflow: 1/h
    queue: 1
    overflow: defer
  - name: admit
    outflow: 1000/s
    queue: 1000
    admit: {algorithm: fixed_window, limit: 1/h}
`

func (e *env) direct(t *testing.T, policy string) *client.Direct {
	t.Helper()
	js, err := jetstream.New(e.nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d, err := client.NewDirect(t.Context(), js, policy, client.DirectConfig{})
	if err != nil {
		t.Fatalf("NewDirect(%s): %v", policy, err)
	}
	t.Cleanup(d.Close)
	return d
}

// Jobs published by the lane are delivered by the shaper's drain like any
// other: each key's in order, at the policy's rate; their ids are where
// they are stored, so GET /v1/jobs/{id} finds them queued, then delivered.
func TestDirectLaneDelivers(t *testing.T) {
	e := start(t, lanePolicies)
	if p, err := e.c.Policy(t.Context(), "fast"); err != nil || !p.DirectLane || p.DirectLaneRefused != "" {
		t.Fatalf("Policy(fast) = direct_lane %v (%q), %v; want true", p.DirectLane, p.DirectLaneRefused, err)
	}
	type delivery struct {
		key, payload string
		at           time.Time
	}
	var (
		mu  sync.Mutex
		got []delivery
	)
	sub, err := e.nc.Subscribe("shaper.out.fast.>", func(m *nats.Msg) {
		mu.Lock()
		got = append(got, delivery{m.Header.Get(client.HeaderKey), string(m.Data), time.Now()})
		mu.Unlock()
		m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	e.nc.Flush()

	d := e.direct(t, "fast")
	keys := []string{"k", "a key/with ünicode"}
	var acks []client.Ack
	for i := range 6 {
		for _, k := range keys {
			a, err := d.Publish(k, []byte(fmt.Sprint(i)))
			if err != nil {
				t.Fatalf("Publish(%q, %d): %v", k, i, err)
			}
			acks = append(acks, a)
		}
	}
	ids := map[string]bool{}
	var last client.Result
	for _, a := range acks {
		res, err := a.Result(t.Context())
		if err != nil || res.Outcome != client.OutcomeAccepted || res.ID == "" || ids[res.ID] || res.Policy != "fast" {
			t.Fatalf("Result = %+v, %v; want accepted with a new id", res, err)
		}
		ids[res.ID], last = true, res
	}
	if j, err := e.c.Job(t.Context(), last.ID); err != nil || j.Status != client.JobQueued || j.Key != last.Key {
		t.Errorf("Job(%s) = %+v, %v; want it queued, of key %q", last.ID, j, err, last.Key)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 12 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 12 jobs delivered after 10s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		var order []string
		var at []time.Time
		for _, g := range got {
			if g.key != k {
				continue
			}
			order = append(order, g.payload)
			at = append(at, g.at)
		}
		// 20/s: at most ⌈T·rate⌉+1 deliveries in any window T, so the
		// arrivals of jobs i and j are at least j−i−1 slots of 50 ms
		// apart, however late one of them arrived.
		for i := range at {
			for j := i + 1; j < len(at); j++ {
				if gap := at[j].Sub(at[i]); gap < time.Duration(j-i-1)*50*time.Millisecond {
					t.Errorf("key %q: deliveries %d and %d %v apart, want at least %d slots of 50 ms (20/s)", k, i, j, gap, j-i-1)
				}
			}
		}
		if strings.Join(order, " ") != "0 1 2 3 4 5" {
			t.Errorf("key %q: delivered %v, want 0 to 5 in order", k, order)
		}
	}
	// A delivered job leaves its queue once its slot is freed (after 50 ms).
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		j, err := e.c.Job(t.Context(), last.ID)
		if err == nil && j.Status == client.JobDelivered {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("Job(%s) once delivered = %+v, %v; want delivered", last.ID, j, err)
		}
	}
}

// A full key is refused by JetStream's own per-key limit, as a 429 would
// be; an idempotency key dedupes across the lane and the shaper; a bad key
// and an oversized payload are refused before anything is sent.
func TestDirectLaneFullKey(t *testing.T) {
	e := start(t, lanePolicies)
	d := e.direct(t, "held")
	ctx := t.Context()
	for i := range 2 {
		if res, err := d.Submit(ctx, "k", []byte("job")); err != nil || res.Outcome != client.OutcomeAccepted {
			t.Fatalf("job %d: %+v, %v; want accepted", i, res, err)
		}
	}
	res, err := d.Submit(ctx, "k", []byte("one too many"))
	if err != nil || res.Outcome != client.OutcomeRejected || res.RetryAfter != time.Hour || res.Queued != 2 || res.ID != "" {
		t.Errorf("a job for the full key: %+v, %v; want rejected, retry after the 1h interval, 2 queued", res, err)
	}
	if res, err := e.n.Submit(ctx, "held", "k", []byte("by the shaper")); err != nil || res.Outcome != client.OutcomeRejected {
		t.Errorf("the shaper's answer for the same key: %+v, %v; want rejected", res, err)
	}

	first, err := d.Submit(ctx, "idem", []byte("x"), client.WithIdempotencyKey("order-1"))
	if err != nil || first.Outcome != client.OutcomeAccepted {
		t.Fatalf("with an idempotency key: %+v, %v", first, err)
	}
	for _, s := range []submitter{e.c, e.n} {
		again, err := s.Submit(ctx, "held", "idem", []byte("x"), client.WithIdempotencyKey("order-1"))
		if err != nil || !again.Duplicate || again.ID != first.ID {
			t.Errorf("the same submission through the shaper: %+v, %v; want a duplicate of %s", again, err, first.ID)
		}
	}
	if again, err := d.Submit(ctx, "idem", []byte("x"), client.WithIdempotencyKey("order-1")); err != nil || !again.Duplicate || again.ID != first.ID {
		t.Errorf("the same submission by the lane: %+v, %v; want a duplicate of %s", again, err, first.ID)
	}

	var bad *client.Error
	if _, err := d.Publish("", []byte("x")); !errors.Is(err, client.ErrBadRequest) || !errors.As(err, &bad) || bad.Problem.Detail != "bad key: empty" {
		t.Errorf("Publish with an empty key: %v, want ErrBadRequest saying \"bad key: empty\"", err)
	}
	if _, err := d.Publish("k2", bytes.Repeat([]byte("x"), maxPayload+1)); !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("Publish over the payload limit: %v, want ErrTooLarge", err)
	}
}

// The lane is refused, with a reason, for a policy whose admission does
// more than store: an admit: limit, overflow: defer; and for a policy
// the shapers do not serve.
func TestDirectLaneRefused(t *testing.T) {
	e := start(t, lanePolicies)
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	for policy, why := range map[string]string{"admit": "admission limit (admit: 1/h)", "later": "overflow: defer", "nope": "unknown policy"} {
		d, err := client.NewDirect(t.Context(), js, policy, client.DirectConfig{})
		if d != nil || !errors.Is(err, client.ErrLaneClosed) || !strings.Contains(err.Error(), why) ||
			errors.Is(err, client.ErrUnknownPolicy) != (policy == "nope") {
			t.Errorf("NewDirect(%s) = %v, %v; want ErrLaneClosed saying %q", policy, d, err, why)
		}
		if p, err := e.c.Policy(t.Context(), policy); err == nil && (p.DirectLane || !strings.Contains(p.DirectLaneRefused, why)) {
			t.Errorf("Policy(%s): direct_lane %v (%q), want false saying %q", policy, p.DirectLane, p.DirectLaneRefused, why)
		}
	}
}

// A live change that makes the lane unsafe closes it at once (the shapers
// announce it); resetting the change opens it again; Close closes it.
func TestDirectLaneFollowsLiveChanges(t *testing.T) {
	e := start(t, lanePolicies)
	d := e.direct(t, "fast")
	waitLane := func(open bool) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			_, err := d.Publish("k", []byte("x"))
			if (err == nil) == open {
				return time.Since(start)
			}
			if err != nil && !errors.Is(err, client.ErrLaneClosed) {
				t.Fatalf("Publish: %v", err)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("lane open %v after 5s, want %v (%v)", !open, open, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitLane(true)
	if _, err := e.c.SetPolicy(t.Context(), "fast", client.PolicyChange{Overflow: policies.Value(policies.OverflowDefer)}); err != nil {
		t.Fatal(err)
	}
	if took := waitLane(false); took > time.Second {
		t.Errorf("the lane closed %v after the change, want at once (announced)", took)
	}
	if l := d.Lane(); l.Open || !strings.Contains(l.Refused, "overflow: defer") {
		t.Errorf("Lane() = %+v, want closed for overflow: defer", l)
	}
	if _, err := e.c.ResetPolicy(t.Context(), "fast"); err != nil {
		t.Fatal(err)
	}
	waitLane(true)
	d.Close()
	if _, err := d.Publish("k", []byte("x")); !errors.Is(err, client.ErrLaneClosed) {
		t.Errorf("Publish after Close: %v, want ErrLaneClosed", err)
	}
}
