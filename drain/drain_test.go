package drain_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// rig is a policy's queue and drainer on a real in-process JetStream, with a
// subscriber recording every delivery.
type rig struct {
	t   *testing.T
	nc  *nats.Conn
	q   *queue.Queue
	d   *drain.Drainer
	pol policies.Policy
	sub *nats.Subscription

	mu   sync.Mutex
	got  []delivery
	more chan struct{}
}

type delivery struct {
	key, id string
	attempt int
	at      time.Time
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
	sink, err := drain.NewNATSSink(r.nc, sinkCfg)
	if err != nil {
		t.Fatal(err)
	}
	r.d = drain.New(r.q, sink, p, drain.Config{})
	t.Cleanup(r.d.Stop)
	return r
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

// wait returns the deliveries once there are n of them, failing after timeout.
func (r *rig) wait(n int, timeout time.Duration) []delivery {
	r.t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		if len(r.got) >= n {
			out := append([]delivery(nil), r.got...)
			r.mu.Unlock()
			return out
		}
		have := len(r.got)
		r.mu.Unlock()
		select {
		case <-r.more:
		case <-deadline:
			depths, err := r.q.TokenDepths(context.Background())
			r.t.Fatalf("got %d deliveries after %v, want %d; drainer %+v; stored by key %v (err %v); delivered %v",
				have, timeout, n, r.d.Stats(), depths, err, r.ids())
		}
	}
}

// ids lists the job ids delivered so far, in order.
func (r *rig) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.got))
	for i, d := range r.got {
		out[i] = d.id
	}
	return out
}

func byKey(ds []delivery) map[string][]delivery {
	m := map[string][]delivery{}
	for _, d := range ds {
		m[d.key] = append(m[d.key], d)
	}
	return m
}

// maxInWindow is the largest number of deliveries starting within any window of length w.
func maxInWindow(ds []delivery, w time.Duration) int {
	best, j := 0, 0
	for i := range ds {
		for ds[i].at.Sub(ds[j].at) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func checkFIFO(t *testing.T, key string, ds []delivery, ids []string) {
	t.Helper()
	if len(ds) != len(ids) {
		t.Errorf("key %q: %d deliveries, want %d", key, len(ds), len(ids))
		return
	}
	for i := range ds {
		if ds[i].id != ids[i] {
			t.Errorf("key %q: delivery %d is %q, want %q (FIFO)", key, i, ds[i].id, ids[i])
			return
		}
	}
}

func TestDrainOneKeyAtRate(t *testing.T) {
	r := newRig(t, policy(t, "50/s", 500), drain.NATSConfig{})
	ids := r.admit("k", 500)
	r.d.Start(context.Background())
	ds := r.wait(500, 30*time.Second)
	checkFIFO(t, "k", ds, ids)
	span := ds[len(ds)-1].at.Sub(ds[0].at)
	rate := float64(len(ds)-1) / span.Seconds()
	if math.Abs(rate-50)/50 > 0.02 {
		t.Errorf("achieved rate %.2f/s over %v, want 50/s within 2%%", rate, span)
	}
	if got := maxInWindow(ds, time.Second); got > 52 {
		t.Errorf("%d deliveries in one second, want at most 52", got)
	}
	t.Logf("500 jobs: %.3f/s, at most %d in a second", rate, maxInWindow(ds, time.Second))
}

func TestDrainManyKeysSideBySide(t *testing.T) {
	r := newRig(t, policy(t, "10/s", 20), drain.NATSConfig{})
	want := map[string][]string{}
	for i := range 100 {
		k := fmt.Sprint("key", i)
		want[k] = r.admit(k, 20)
	}
	start := time.Now()
	r.d.Start(context.Background())
	ds := r.wait(2000, 30*time.Second)
	took := time.Since(start)
	// 20 jobs at 10/s: the first at once, the last 1.9 s later.
	if took < 1800*time.Millisecond || took > 3500*time.Millisecond {
		t.Errorf("100 keys × 20 jobs at 10/s took %v, want about 2 s", took)
	}
	for k, kd := range byKey(ds) {
		checkFIFO(t, k, kd, want[k])
		if n := maxInWindow(kd, time.Second); n > 12 {
			t.Errorf("key %q: %d deliveries in one second, want at most 12", k, n)
		}
	}
	for i := 0; (r.d.Stats().Delivered != 2000 || r.d.Stats().Queued != 0) && i < 100; i++ {
		time.Sleep(10 * time.Millisecond) // the subscriber sees a delivery before the drainer counts it and frees its slot
	}
	if st := r.d.Stats(); st.Delivered != 2000 || st.Queued != 0 {
		t.Errorf("Stats() = %+v, want 2000 delivered, 0 queued", st)
	}
}

func TestDrainTotalCap(t *testing.T) {
	p := policy(t, "20/s", 50)
	p.Total, _ = policies.ParseRate("40/s")
	r := newRig(t, p, drain.NATSConfig{})
	for i := range 8 {
		r.admit(fmt.Sprint("k", i), 20)
	}
	r.d.Start(context.Background())
	ds := r.wait(120, 30*time.Second)
	span := ds[len(ds)-1].at.Sub(ds[0].at)
	rate := float64(len(ds)-1) / span.Seconds()
	if math.Abs(rate-40)/40 > 0.05 {
		t.Errorf("policy rate %.2f/s under total 40/s, want 40/s within 5%%", rate)
	}
	if n := maxInWindow(ds, time.Second); n > 43 {
		t.Errorf("%d deliveries in one second under total 40/s, want at most 43", n)
	}
	// Fairness: every key got a share.
	for k, kd := range byKey(ds) {
		if len(kd) < 10 {
			t.Errorf("key %q got %d of the first 120 deliveries, want a fair share (15)", k, len(kd))
		}
	}
}

// A burst against a draining key sees exactly the queue size free: a
// delivered job keeps its slot until its outflow slot ends.
func TestDrainBurstSeesQueueSize(t *testing.T) {
	r := newRig(t, policy(t, "20/s", 10), drain.NATSConfig{})
	r.d.Start(context.Background())
	var (
		mu     sync.Mutex
		stored []string
		full   int
		wg     sync.WaitGroup
	)
	for i := range 50 {
		wg.Go(func() {
			id := fmt.Sprint("b", i)
			_, err := r.q.Admit(context.Background(), queue.Job{ID: id, Key: "k"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				stored = append(stored, id)
			case errors.Is(err, queue.ErrFull):
				full++
			default:
				t.Errorf("Admit = %v", err)
			}
		})
	}
	wg.Wait()
	if len(stored) != 10 || full != 40 {
		t.Fatalf("burst of 50: %d stored, %d full; want 10, 40", len(stored), full)
	}
	ds := r.wait(10, 10*time.Second)
	arrivals := make([]time.Time, len(ds))
	for i, d := range ds {
		arrivals[i] = d.at
	}
	for _, bad := range testenv.Paced(arrivals, 50*time.Millisecond, 300*time.Millisecond) {
		t.Error(bad)
	}
}

func TestDrainLeavesQueuedJobs(t *testing.T) {
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
	r.wait(delivered, 5*time.Second) // the subscriber sees the last deliveries a little later
	r.mu.Lock()
	n := len(r.got)
	r.mu.Unlock()
	depths, err := r.q.Depths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int(depths["k"])+n != 50 {
		t.Errorf("after Drain: %d delivered + %d queued, want 50 in all (nothing lost, nothing left undeleted)", n, depths["k"])
	}
}

func TestDrainRetriesFailedDelivery(t *testing.T) {
	p := policy(t, "50/s", 10)
	r := newRig(t, p, drain.NATSConfig{Confirm: true, Timeout: time.Second})
	// A confirmed delivery has no responder until one subscribes.
	r.sub.Unsubscribe()
	r.admit("k", 2)
	r.d.Start(context.Background())
	time.Sleep(500 * time.Millisecond)
	if st := r.d.Stats(); st.Failed == 0 || st.Delivered != 0 {
		t.Fatalf("with no responders: %+v, want failures and no delivery", st)
	}
	got := make(chan *nats.Msg, 10)
	sub, err := r.nc.Subscribe(p.DeliverSubject()+".k", func(m *nats.Msg) { got <- m; m.Respond(nil) })
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
			if i == 0 && m.Header.Get(queue.HeaderAttempt) == "1" {
				t.Errorf("first job delivered with Shaper-Attempt 1 after failures")
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("delivery %d never came after a responder appeared", i)
		}
	}
}

// A drainer that takes a policy over (passive, then active) delivers every
// job, in order, whether it was stored before it started or while another
// drainer was delivering: it reads heads by the sequences it watched, and
// skips those the other one removed.
func TestDrainHandover(t *testing.T) {
	r := newRig(t, policy(t, "50/s", 100), drain.NATSConfig{})
	sink, err := drain.NewNATSSink(r.nc, drain.NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b := drain.New(r.q, sink, r.pol, drain.Config{Passive: true})
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
	time.Sleep(100 * time.Millisecond) // a's steps in flight end
	b.SetActive(true)
	r.wait(30, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	r.mu.Lock()
	ds := append([]delivery(nil), r.got...)
	r.mu.Unlock()
	seen := map[string]bool{}
	var uniq []delivery
	for _, d := range ds {
		if !seen[d.id] {
			seen[d.id] = true
			uniq = append(uniq, d)
		}
	}
	if dups := len(ds) - len(uniq); dups > 3 {
		t.Errorf("%d duplicates across the handover, want at most one per key", dups)
	}
	for k, kd := range byKey(uniq) {
		checkFIFO(t, k, kd, want[k])
	}
}
