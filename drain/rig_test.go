package drain_test

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// delivery is one job a test's consumer received.
type delivery struct {
	key, id string
	attempt int
	at      time.Time
}

// memRig is a MemQueue and a Drainer over it, with a recorder as the sink.
// Made inside a synctest bubble, every time it sees is the bubble's.
type memRig struct {
	t    *testing.T
	q    *drain.MemQueue
	d    *drain.Drainer
	sink *recorder
}

func newMemRig(t *testing.T, size int, pace drain.Pace, cfg drain.Config) *memRig {
	t.Helper()
	q, err := drain.NewMemQueue("p", size, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r := &memRig{t: t, q: q, sink: newRecorder()}
	r.d = drain.New(q, r.sink, pace, cfg)
	t.Cleanup(r.d.Stop)
	return r
}

// admit stores n jobs of key, with ids <key>-0, <key>-1…, and returns the ids.
func (r *memRig) admit(key string, n int) []string {
	r.t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", key, r.sink.next(key))
		if _, err := r.q.Admit(context.Background(), queue.Job{ID: ids[i], Key: key, Payload: []byte(ids[i])}); err != nil {
			r.t.Fatalf("Admit(%q, %s) = %v", key, ids[i], err)
		}
	}
	return ids
}

// recorder is a Sink that records every delivery at the time it was made,
// and fails those its fail func says to.
type recorder struct {
	mu       sync.Mutex
	got      []delivery
	attempts []delivery // every call, delivered or not
	fail     func(d *drain.Delivery) error
	ids      map[string]int
	more     chan struct{}
}

func newRecorder() *recorder {
	return &recorder{ids: map[string]int{}, more: make(chan struct{}, 1)}
}

func (r *recorder) next(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.ids[key]
	r.ids[key]++
	return n
}

func (r *recorder) Deliver(_ context.Context, d *drain.Delivery) error {
	r.mu.Lock()
	fail := r.fail
	at := delivery{key: d.Msg.Key, id: d.Msg.ID, attempt: d.Msg.Attempt, at: time.Now()}
	r.attempts = append(r.attempts, at)
	r.mu.Unlock()
	if fail != nil {
		if err := fail(d); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.got = append(r.got, at)
	r.mu.Unlock()
	select {
	case r.more <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) setFail(fail func(d *drain.Delivery) error) {
	r.mu.Lock()
	r.fail = fail
	r.mu.Unlock()
}

func (r *recorder) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

func (r *recorder) tries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.attempts...)
}

// wait returns the deliveries once there are n, failing the test if they
// have not come within timeout. In a synctest bubble the timeout is
// virtual: a drainer that stops delivering fails the test at once.
func (r *recorder) wait(t *testing.T, n int, timeout time.Duration) []delivery {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ds := r.deliveries()
		if len(ds) >= n {
			return ds
		}
		select {
		case <-r.more:
		case <-deadline.C:
			t.Fatalf("%d deliveries after %v, want %d: %v", len(ds), timeout, n, ds)
		}
	}
}

// elapse lets d pass on the clock. In a synctest bubble it costs no wall
// time: the bubble's clock jumps once every goroutine is blocked.
func elapse(d time.Duration) {
	t := time.NewTimer(d)
	<-t.C
}

// noDeadlock, called outside a synctest bubble around it, makes the test binary fail loudly, with every goroutine's
// stack, if f has not returned within a minute of wall time: a goroutine
// blocked on a mutex does not let a synctest bubble's clock move, so a
// deadlock would otherwise hang until go test's own timeout.
func noDeadlock(t *testing.T, f func()) {
	t.Helper()
	watchdog := time.AfterFunc(time.Minute, func() {
		debug.SetTraceback("all")
		panic(t.Name() + ": deadlocked")
	})
	defer watchdog.Stop()
	f()
}

func byKey(ds []delivery) map[string][]delivery {
	m := map[string][]delivery{}
	for _, d := range ds {
		m[d.key] = append(m[d.key], d)
	}
	return m
}

// maxInWindow is the largest number of deliveries starting within any
// window [t, t+w) (ds in time order).
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
