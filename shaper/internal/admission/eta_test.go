package admission_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/pipeline"
)

// etaRig is a pipeline on MemQueues driven on a virtual clock whose sink
// records when each job started, and fails the first attempts of the jobs
// fail says.
type etaRig struct {
	t       *testing.T
	clock   *clock
	line    *pipeline.Pipeline
	mu      sync.Mutex
	started map[string]time.Time
	fail    map[string]int // attempts left to fail, per job id
}

func newETARig(t *testing.T, yaml string) *etaRig {
	t.Helper()
	r := &etaRig{t: t, clock: &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, started: map[string]time.Time{}, fail: map[string]int{}}
	set, err := policies.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p := set.Policies()[0]
	mcfg := drain.MemQueueConfig{MaxPayload: 64, Clock: r.clock}
	q, err := drain.NewMemQueue(p.Name, p.Queue, mcfg)
	if err != nil {
		t.Fatal(err)
	}
	dq, err := drain.NewMemQueue(p.Name, admission.DeferredSize(p), mcfg)
	if err != nil {
		t.Fatal(err)
	}
	line, err := pipeline.New(p, q, dq, sinkFunc(func(_ context.Context, d *drain.Delivery) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.fail[d.Msg.ID] > 0 {
			r.fail[d.Msg.ID]--
			return errors.New("downstream failed")
		}
		r.started[d.Msg.ID] = r.clock.Now()
		return nil
	}), pipeline.Config{Clock: r.clock, Jitter: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	r.line = line
	line.Advance(context.Background(), r.clock.Now())
	return r
}

// submit admits a job of key and runs what is due at once, as the live
// drainer would between two submissions; it returns the decision.
func (r *etaRig) submit(key string) admission.Decision {
	r.t.Helper()
	now := r.clock.Now()
	d := r.line.Gate.Admit(context.Background(), admission.Request{Key: key}, now)
	r.line.Advance(context.Background(), now)
	return d
}

// run drives the pipeline until nothing is due.
func (r *etaRig) run() {
	for {
		next, ok := r.line.Advance(context.Background(), r.clock.Now())
		if !ok {
			return
		}
		r.clock.mu.Lock()
		r.clock.now = next
		r.clock.mu.Unlock()
	}
}

// TestETAFromTheSchedule: the ETA of every 202 is when the job starts,
// within one slot, for a total cap (the example: 8 keys at 10/s
// under 1/s, and several jobs a key submitted round by round), for a key
// whose failed job is retried, and for deferred jobs.
func TestETAFromTheSchedule(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		keys, perKey int
		fail         int // the first job fails this many times first
		slot         time.Duration
	}{
		{"total cap, one job per key", "policies:\n  - {name: p, outflow: 10/s, total: 1/s, queue: 10}\n", 8, 1, 0, time.Second},
		{"total cap, rounds", "policies:\n  - {name: p, outflow: 10/s, total: 4/s, queue: 10}\n", 5, 4, 0, 250 * time.Millisecond},
		{"retrying key, budget", "policies:\n  - {name: p, outflow: 2/s, queue: 10, retry: {backoff: 1s, max_backoff: 1s}}\n", 1, 6, 2, 500 * time.Millisecond},
		{"defer", "policies:\n  - {name: p, outflow: 2/s, queue: 2, overflow: defer}\n", 1, 6, 0, 500 * time.Millisecond},
		{"retrying key, strict", "policies:\n  - {name: p, outflow: 2/s, queue: 10, retry: {backoff: 1s, max_backoff: 1s, budget: off}}\n", 1, 6, 2, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newETARig(t, tc.policy)
			eta := map[string]time.Time{}
			if tc.fail > 0 {
				d := r.submit("k0")
				r.fail[d.ID] = tc.fail
				r.line.Advance(context.Background(), r.clock.Now()) // its first attempt fails
			}
			for round := range tc.perKey {
				for k := range tc.keys {
					d := r.submit("k" + string(rune('0'+k)))
					if d.Outcome != admission.Accepted && d.Outcome != admission.Deferred {
						t.Fatalf("round %d key %d: %v, want accepted or deferred", round, k, d.Outcome)
					}
					eta[d.ID] = r.clock.Now().Add(d.ETA)
				}
			}
			r.run()
			for id, want := range eta {
				got, ok := r.started[id]
				if !ok {
					t.Fatalf("job %s never delivered", id)
				}
				if diff := got.Sub(want); diff > tc.slot || diff < -tc.slot {
					t.Errorf("job %s: ETA %v, started %v: more than one slot (%v) apart", id, want.Format("15:04:05.000"), got.Format("15:04:05.000"), tc.slot)
				}
			}
		})
	}
}
