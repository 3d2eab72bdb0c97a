package drain_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// These tests run a Drainer over *queue.Queue on a real in-process
// JetStream, with a NATSSink publishing to a subscriber: they show that the
// JetStream queue behaves behind drain.Queue, and that deliveries reach
// NATS. The scheduler itself is tested on a MemQueue under synctest
// (scheduler_test.go), where time is exact.

// rig is a policy's queue and drainer on a real in-process JetStream, with a
// subscriber recording every delivery.
type rig struct {
	t       *testing.T
	nc      *nats.Conn
	q       *queue.Queue
	d       *drain.Drainer
	pol     policies.Policy
	sub     *nats.Subscription // the rig's consumer, on subConn
	subConn *nats.Conn

	mu   sync.Mutex
	got  []delivery
	more chan struct{}
}

func policy(t *testing.T, outflow string, size int) policies.Policy {
	t.Helper()
	r, err := policies.ParseRate(outflow)
	if err != nil {
		t.Fatal(err)
	}
	return policies.Policy{Name: "p", Outflow: r, Queue: size, Overflow: policies.OverflowReject,
		Retry: policies.Retry{Attempts: 5, Backoff: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}}
}

// paceOf is the shaper's conversion of a policy into a pace.
func paceOf(p policies.Policy) drain.Pace {
	return drain.Pace{Interval: p.Outflow.Interval(), Total: p.Total.Interval(), Retry: drain.Retry{
		Attempts: p.Retry.Attempts, Backoff: p.Retry.Backoff, MaxBackoff: p.Retry.MaxBackoff, Deadline: p.Retry.Deadline,
		Budget: p.Retry.Budget.Share()}}
}

func newRig(t *testing.T, p policies.Policy, sinkCfg drain.NATSConfig) *rig {
	t.Helper()
	s := testenv.NATS(t)
	r := &rig{t: t, nc: testenv.Connect(t, s), pol: p, more: make(chan struct{}, 1)}
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	r.q, err = queue.Open(context.Background(), js, p.Name, p.Queue, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	subConn := testenv.Connect(t, s)
	r.subConn = subConn
	r.sub, err = subConn.Subscribe(p.DeliverSubject()+".>", func(m *nats.Msg) {
		a, _ := strconv.Atoi(m.Header.Get(queue.HeaderAttempt))
		r.mu.Lock()
		r.got = append(r.got, delivery{key: m.Header.Get(queue.HeaderKey), id: m.Header.Get(queue.HeaderJobID), attempt: a, at: time.Now()})
		r.mu.Unlock()
		if m.Reply != "" {
			m.Respond(nil)
		}
		select {
		case r.more <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// Subscribe only queues SUB: without the round trip the first deliveries
	// of a busy machine can reach the server before the subscription does.
	if err := subConn.Flush(); err != nil {
		t.Fatal(err)
	}
	r.d = drain.New(r.q, r.sink(sinkCfg), paceOf(p), drain.Config{})
	t.Cleanup(r.d.Stop)
	return r
}

// noConsumer unsubscribes the rig's consumer, and waits until the server
// knows: a delivery sent before the UNSUB reached it would go to the
// consumer no longer reading, and time out (a failed attempt), instead of
// finding no responders.
func (r *rig) noConsumer() {
	r.t.Helper()
	if err := r.sub.Unsubscribe(); err != nil {
		r.t.Fatal(err)
	}
	if err := r.subConn.Flush(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) sink(cfg drain.NATSConfig) drain.Sink {
	r.t.Helper()
	cfg.Subject = r.pol.DeliverSubject()
	sink, err := drain.NewNATSSink(r.nc, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	return sink
}

func (r *rig) admit(key string, n int) []string {
	r.t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", key, i)
		if _, err := r.q.Admit(context.Background(), queue.Job{ID: ids[i], Key: key, Payload: []byte(ids[i])}); err != nil {
			r.t.Fatalf("Admit(%q #%d) = %v", key, i, err)
		}
	}
	return ids
}

// deliveries returns a copy of the deliveries so far.
func (r *rig) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// wait returns the deliveries once there are n of them, failing after timeout.
func (r *rig) wait(n int, timeout time.Duration) []delivery {
	r.t.Helper()
	deadline := time.After(timeout)
	for {
		ds := r.deliveries()
		if len(ds) >= n {
			return ds
		}
		select {
		case <-r.more:
		case <-deadline:
			depths, _, err := r.q.TokenDepths(context.Background())
			r.t.Fatalf("got %d deliveries after %v, want %d; drainer %+v; stored by key %v (err %v); delivered %v",
				len(ds), timeout, n, r.d.Stats(), depths, err, ds)
		}
	}
}

// waitFor waits until cond holds, looking every few milliseconds, and fails
// the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("still waiting after %v for %s", timeout, what)
		}
	}
}

// Drain ends with the delivered jobs' slots freed and the rest queued:
// nothing lost, nothing left undeleted.
func TestJetStreamDrainLeavesQueuedJobs(t *testing.T) {
	r := newRig(t, policy(t, "10/s", 100), drain.NATSConfig{})
	r.admit("k", 50)
	r.d.Start(context.Background())
	r.wait(5, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.d.Drain(ctx); err != nil {
		t.Fatalf("Drain = %v", err)
	}
	r.d.Stop()
	delivered := int(r.d.Stats().Delivered)
	n := len(r.wait(delivered, 5*time.Second)) // the subscriber sees the last deliveries a little later
	depths, err := r.q.Depths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int(depths["k"])+n != 50 || n != delivered {
		t.Errorf("after Drain: %d delivered (drainer says %d) + %d queued, want 50 in all", n, delivered, depths["k"])
	}
}

// A delivery nobody answers ("no responders": no consumer online) is
// neither an attempt nor a failure: the job stays at its key's head, the
// sink says since when it waits, and once a consumer subscribes the jobs
// are delivered in order, as first attempts.
func TestJetStreamWaitsForAConsumer(t *testing.T) {
	p := policy(t, "50/s", 10)
	r := newRig(t, p, drain.NATSConfig{})
	r.noConsumer()
	sink, err := drain.NewNATSSink(r.nc, drain.NATSConfig{Subject: p.DeliverSubject(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.d.Stop()
	var probes atomic.Int32 // deliveries that found no consumer
	r.d = drain.New(r.q, sink, paceOf(p), drain.Config{OnDeliver: func(e drain.Event) {
		if e.Err != nil {
			probes.Add(1)
		}
	}})
	t.Cleanup(r.d.Stop)
	r.admit("k", 2)
	r.d.Start(context.Background())
	waitFor(t, 10*time.Second, "three unanswered probes", func() bool { return probes.Load() >= 3 })
	if sink.Waiting().IsZero() {
		t.Error("the sink does not say it waits for a consumer")
	}
	if st := r.d.Stats(); st.Delivered != 0 || st.Failed != 0 {
		t.Fatalf("with no consumer: %+v, want neither deliveries nor failures", st)
	}
	token, _ := queue.EncodeKey("k")
	if st := r.d.Key(token, time.Now()); st.Queued != 2 {
		t.Errorf("with no consumer the key holds %d jobs, want 2", st.Queued)
	}
	got := make(chan *nats.Msg, 10)
	sub, err := r.nc.Subscribe(p.DeliverSubject()+".>", func(m *nats.Msg) { got <- m; m.Respond(nil) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i := range 2 {
		select {
		case m := <-got:
			if id := m.Header.Get(queue.HeaderJobID); id != fmt.Sprint("k-", i) {
				t.Errorf("delivery %d = %q, want k-%d", i, id, i)
			}
			if a := m.Header.Get(queue.HeaderAttempt); a != "" && a != "1" {
				t.Errorf("job k-%d delivered with Shaper-Attempt %s after waiting for a consumer, want 1", i, a)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("delivery %d never came after a consumer subscribed", i)
		}
	}
	waitFor(t, 5*time.Second, "the sink to stop waiting", func() bool { return sink.Waiting().IsZero() })
	if st := r.d.Stats(); st.Failed != 0 {
		t.Errorf("after waiting for a consumer: %d failed attempts counted, want 0", st.Failed)
	}
}

// A consumer that takes a job and does not answer in time fails the
// attempt: the job is retried, as attempt 2, and delivered.
func TestJetStreamRetriesUnansweredDelivery(t *testing.T) {
	p := policy(t, "50/s", 10)
	r := newRig(t, p, drain.NATSConfig{})
	r.noConsumer()
	r.d.Stop()
	r.d = drain.New(r.q, r.sink(drain.NATSConfig{Timeout: 200 * time.Millisecond}), paceOf(p), drain.Config{})
	t.Cleanup(r.d.Stop)
	got := make(chan *nats.Msg, 10)
	var calls int
	sub, err := r.nc.Subscribe(p.DeliverSubject()+".>", func(m *nats.Msg) {
		if calls++; calls > 1 { // the first delivery gets no answer
			m.Respond(nil)
		}
		got <- m
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r.admit("k", 1)
	r.d.Start(context.Background())
	var attempts []string
	for len(attempts) < 2 {
		select {
		case m := <-got:
			attempts = append(attempts, m.Header.Get(queue.HeaderAttempt))
		case <-time.After(10 * time.Second):
			t.Fatalf("deliveries %q: want a second attempt after an unanswered one", attempts)
		}
	}
	if attempts[1] != "2" {
		t.Errorf("Shaper-Attempt of the retry = %q, want 2", attempts[1])
	}
	waitFor(t, 5*time.Second, "the retried job to be delivered", func() bool { return r.d.Stats().Delivered == 1 })
}

// A drainer that takes a policy over (passive, then active) delivers every
// job, in order, whether it was stored before it started or while another
// drainer was delivering: it reads heads by the sequences it watched, and
// skips those the other one removed.
func TestJetStreamHandover(t *testing.T) {
	r := newRig(t, policy(t, "50/s", 100), drain.NATSConfig{})
	b := drain.New(r.q, r.sink(drain.NATSConfig{}), paceOf(r.pol), drain.Config{Passive: true})
	t.Cleanup(b.Stop)
	want := map[string][]string{}
	for i := range 30 { // three keys, interleaved
		k := fmt.Sprint("k", i%3)
		id := fmt.Sprintf("%s-%d", k, i/3)
		want[k] = append(want[k], id)
		if _, err := r.q.Admit(context.Background(), queue.Job{ID: id, Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	b.Start(context.Background())
	r.d.Start(context.Background()) // a drains first
	r.wait(9, 10*time.Second)
	r.d.SetActive(false)
	waitFor(t, 5*time.Second, "a's steps in flight to end", func() bool { return r.d.Stats().InFlight == 0 })
	b.SetActive(true)
	// Every job once at least; a job a delivered without freeing its slot
	// comes again, first of its key, so by then every duplicate is in.
	waitFor(t, 10*time.Second, "every job delivered", func() bool { return len(unique(r.deliveries())) == 30 })
	ds := r.deliveries()
	uniq := unique(ds)
	if dups := len(ds) - len(uniq); dups > 3 {
		t.Errorf("%d duplicates across the handover, want at most one per key", dups)
	}
	for k, kd := range byKey(uniq) {
		checkFIFO(t, k, kd, want[k])
	}
}

// unique returns ds without repeated job ids, first deliveries kept.
func unique(ds []delivery) []delivery {
	seen := map[string]bool{}
	var out []delivery
	for _, d := range ds {
		if !seen[d.id] {
			seen[d.id] = true
			out = append(out, d)
		}
	}
	return out
}

// The NATS sink needs the subject prefix its deliveries go under.
func TestNATSSinkNeedsSubject(t *testing.T) {
	if _, err := drain.NewNATSSink(nil, drain.NATSConfig{}); err == nil {
		t.Errorf("NewNATSSink without a subject = nil error, want one")
	}
}
