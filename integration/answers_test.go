package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/client"
)

// webhook is a downstream that receives a policy's deliveries as webhook
// POSTs on 127.0.0.1, records when each job first arrived, and fails the
// attempts its fail func says to with 500.
type webhook struct {
	url  string
	mu   sync.Mutex
	at   map[string]time.Time // job id → first successful arrival
	all  []time.Time          // every successful arrival
	fail func(id string, attempt int) bool
}

func startWebhook(t *testing.T) *webhook {
	t.Helper()
	w := &webhook{at: map[string]time.Time{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		now := time.Now()
		id := r.Header.Get(client.HeaderJobID)
		var attempt int
		fmt.Sscan(r.Header.Get(client.HeaderAttempt), &attempt)
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.fail != nil && w.fail(id, attempt) {
			rw.WriteHeader(http.StatusInternalServerError)
			return
		}
		if _, ok := w.at[id]; !ok {
			w.at[id] = now
		}
		w.all = append(w.all, now)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	w.url = "http://" + ln.Addr().String() + "/"
	return w
}

func (w *webhook) setFail(fail func(id string, attempt int) bool) {
	w.mu.Lock()
	w.fail = fail
	w.mu.Unlock()
}

// arrived returns when job id arrived, false before it did.
func (w *webhook) arrived(id string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.at[id]
	return at, ok
}

// promise is an answer a producer got: when the job is expected to reach
// the consumer.
type promise struct {
	id   string
	want time.Time
	what string
}

// checkPromises waits until every promised job arrived and checks that each
// arrived within tolerance of its promise.
func checkPromises(t *testing.T, w *webhook, promises []promise, tolerance time.Duration) {
	t.Helper()
	waitFor(t, 60*time.Second, "every job to reach the consumer", func() bool {
		for _, p := range promises {
			if _, ok := w.arrived(p.id); !ok {
				return false
			}
		}
		return true
	})
	for _, p := range promises {
		got, _ := w.arrived(p.id)
		off := got.Sub(p.want)
		t.Logf("%s: arrived %+v after its promise", p.what, off.Round(time.Millisecond))
		if off > tolerance || off < -tolerance {
			t.Errorf("%s: arrived %v after the time promised, more than %v apart", p.what, off.Round(time.Millisecond), tolerance)
		}
	}
}

// TestAnswersFromTheSchedule submits to a running shaper and checks what it
// promises producers against what happens: every 202's eta_ms is within
// one slot of when the job reaches a real consumer, and a 429's
// Retry-After within one slot of when a submission is next accepted — for
// a policy with a total cap, one that defers, and a key whose failed job is
// retried. (docs/architecture.md, "One schedule".) A few milliseconds of
// hand-over and HTTP are allowed on top of the slot.
func TestAnswersFromTheSchedule(t *testing.T) {
	needBinaries(t)
	const slack = 150 * time.Millisecond // the hand-over to the consumer, on a busy machine
	t.Run("total cap", func(t *testing.T) {
		t.Parallel()
		w := startWebhook(t)
		// 10/s per key, 2/s over all: the shape, the cap binding.
		cfg := embeddedShaper(t, fmt.Sprintf("policies:\n  - {name: tot, outflow: 10/s, total: 2/s, queue: 3, deliver: {webhook: %q}}\n", w.url))
		startShaper(t, cfg)
		sub := newSubmitter(cfg.httpAddr, 10*time.Second)
		ctx := context.Background()
		var promises []promise
		// Six keys, two jobs each, submitted round by round.
		for round := range 2 {
			for k := range 6 {
				key := fmt.Sprintf("k%d", k)
				res, err := sub.api.Submit(ctx, "tot", key, []byte("x"))
				if err != nil || res.Outcome != client.OutcomeAccepted {
					t.Fatalf("submit %s: %+v, %v", key, res, err)
				}
				promises = append(promises, promise{res.ID, time.Now().Add(res.ETA), fmt.Sprintf("round %d key %s (eta %v)", round, key, res.ETA)})
			}
		}
		// Once k0's delivered job has freed its slot, more fill it; the
		// 429 that comes then says when its next job starts (seconds away,
		// under the cap) and frees a slot.
		first := promises[0].id
		waitFor(t, 10*time.Second, "k0's first job", func() bool { _, ok := w.arrived(first); return ok })
		time.Sleep(250 * time.Millisecond) // its slot is held 100 ms
		for i := 0; ; i++ {
			res, err := sub.api.Submit(ctx, "tot", "k0", []byte("x"))
			if err == nil && res.Outcome == client.OutcomeRejected {
				break
			}
			if err != nil || res.Outcome != client.OutcomeAccepted || i == 3 {
				t.Fatalf("job %d more of k0: %+v, %v; want accepted until the key is full", i, res, err)
			}
			promises = append(promises, promise{res.ID, time.Now().Add(res.ETA), fmt.Sprintf("k0's job %d more (eta %v)", i, res.ETA)})
		}
		checkRetryAfter(t, sub, "tot", "k0", 500*time.Millisecond+slack)
		checkPromises(t, w, promises, 500*time.Millisecond+slack)
	})
	t.Run("defer", func(t *testing.T) {
		t.Parallel()
		w := startWebhook(t)
		cfg := embeddedShaper(t, fmt.Sprintf("policies:\n  - {name: dfr, outflow: 4/s, queue: 2, overflow: defer, deliver: {webhook: %q}}\n", w.url))
		startShaper(t, cfg)
		sub := newSubmitter(cfg.httpAddr, 10*time.Second)
		ctx := context.Background()
		var promises []promise
		for i := range 8 {
			res, err := sub.api.Submit(ctx, "dfr", "k", []byte("x"))
			switch {
			case res.Outcome == client.OutcomeAccepted:
				promises = append(promises, promise{res.ID, time.Now().Add(res.ETA), fmt.Sprintf("job %d accepted (eta %v)", i, res.ETA)})
			case res.Outcome == client.OutcomeDeferred:
				promises = append(promises, promise{res.ID, time.Now().Add(res.RetryAfter), fmt.Sprintf("job %d deferred (expected in %v)", i, res.RetryAfter)})
			default:
				t.Fatalf("submit %d: %+v, %v", i, res, err)
			}
		}
		checkPromises(t, w, promises, 250*time.Millisecond+slack)
	})
	t.Run("retrying key", func(t *testing.T) {
		t.Parallel()
		w := startWebhook(t)
		cfg := embeddedShaper(t, fmt.Sprintf("policies:\n  - {name: rty, outflow: 4/s, queue: 10, retry: {backoff: 1s, max_backoff: 1s, budget: off}, deliver: {webhook: %q}}\n", w.url))
		startShaper(t, cfg)
		sub := newSubmitter(cfg.httpAddr, 10*time.Second)
		ctx := context.Background()
		// The first delivery of the key fails once; the jobs submitted
		// after it wait for its retry (strict order), a second later.
		failed := make(chan struct{})
		var once sync.Once
		w.setFail(func(id string, attempt int) bool {
			failing := false
			once.Do(func() { failing = true; close(failed) })
			return failing
		})
		if _, err := sub.api.Submit(ctx, "rty", "k", []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-failed:
		case <-time.After(10 * time.Second):
			t.Fatal("the first job's delivery never came")
		}
		time.Sleep(50 * time.Millisecond) // the failure is recorded
		var promises []promise
		for i := range 4 {
			res, err := sub.api.Submit(ctx, "rty", "k", []byte("x"))
			if err != nil || res.Outcome != client.OutcomeAccepted {
				t.Fatalf("submit %d: %+v, %v", i, res, err)
			}
			promises = append(promises, promise{res.ID, time.Now().Add(res.ETA), fmt.Sprintf("job %d behind the failed one (eta %v)", i, res.ETA)})
		}
		checkPromises(t, w, promises, 250*time.Millisecond+slack)
	})
}

// checkRetryAfter submits to a full key of a reject policy and checks that
// the 429's Retry-After is within tolerance of when the key next accepts a
// job (found by asking every 20 ms; refusals change nothing).
func checkRetryAfter(t *testing.T, sub *submitter, policy, key string, tolerance time.Duration) {
	t.Helper()
	ctx := context.Background()
	res, err := sub.api.Submit(ctx, policy, key, []byte("x"))
	if err != nil || res.Outcome != client.OutcomeRejected {
		t.Fatalf("submit to the full key %s: %+v, %v; want rejected", key, res, err)
	}
	t.Logf("429: %+v", res)
	promised := time.Now().Add(res.RetryAfter)
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := sub.api.Submit(ctx, policy, key, []byte("x"))
		if err == nil && res.Outcome == client.OutcomeAccepted {
			off := time.Since(promised)
			t.Logf("accepted %v after the Retry-After: %+v", off.Round(time.Millisecond), res)
			if off > tolerance || off < -tolerance {
				t.Errorf("Retry-After: the key accepted a job %v after the time promised, more than %v apart", off.Round(time.Millisecond), tolerance)
			}
			return
		}
		if err != nil && !strings.Contains(err.Error(), "full") {
			t.Fatalf("submit while full: %+v, %v", res, err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the full key never accepted a job again")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
