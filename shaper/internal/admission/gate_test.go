package admission_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/pipeline"
)

// These tests drive a Gate over in-memory queues and driven drainers on a
// virtual clock — the same code that serves HTTP, NATS and re-admission,
// with time under the test's control: no JetStream, no sleeps.

// clock is a virtual clock; a driven Drainer never asks it for timers.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) NewTimer(time.Duration) drain.Timer { panic("a driven drainer uses no timers") }

func (c *clock) add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// rig is one policy's admission: its gate, its queue and deferred store
// (MemQueues) and their drainers, driven on clock; delivered lists the ids
// the downstream received, in order.
type rig struct {
	t          *testing.T
	clock      *clock
	gate       *admission.Gate
	q, dq      *drain.MemQueue
	main       *drain.Group
	dfr        *drain.Drainer
	line       *pipeline.Pipeline
	mu         sync.Mutex
	delivered  []string
	readmitted []string
}

type sinkFunc func(ctx context.Context, d *drain.Delivery) error

func (f sinkFunc) Deliver(ctx context.Context, d *drain.Delivery) error { return f(ctx, d) }

func newRig(t *testing.T, yaml string, cfg admission.Config) *rig {
	t.Helper()
	set, err := policies.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p := set.Policies()[0]
	r := &rig{t: t, clock: &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	mcfg := drain.MemQueueConfig{MaxPayload: 64, Clock: r.clock}
	if r.q, err = drain.NewMemQueue(p.Name, p.Queue, mcfg); err != nil {
		t.Fatal(err)
	}
	if r.dq, err = drain.NewMemQueue(p.Name, admission.DeferredSize(p), mcfg); err != nil {
		t.Fatal(err)
	}
	cfg.OnReadmit = func(id, _ string, _ int) {
		r.mu.Lock()
		r.readmitted = append(r.readmitted, id)
		r.mu.Unlock()
	}
	line, err := pipeline.New(p, r.q, r.dq, sinkFunc(func(_ context.Context, d *drain.Delivery) error {
		r.mu.Lock()
		r.delivered = append(r.delivered, d.Msg.ID)
		r.mu.Unlock()
		return nil
	}), pipeline.Config{Clock: r.clock, Gate: cfg})
	if err != nil {
		t.Fatal(err)
	}
	r.gate, r.main, r.dfr = line.Gate, line.Drain, line.DeferDrain
	r.line = line
	r.advance(0) // start watching the queues
	return r
}

// advance moves the clock by d and runs every step due by then, as a
// replay does (pipeline.Pipeline.Advance).
func (r *rig) advance(d time.Duration) {
	r.line.Advance(context.Background(), r.clock.add(d))
}

func (r *rig) admit(key string, payload ...byte) admission.Decision {
	r.t.Helper()
	return r.gate.Admit(context.Background(), admission.Request{Key: key, Payload: payload}, r.clock.Now())
}

// stored is how many jobs the queue holds.
func (r *rig) stored() int {
	r.t.Helper()
	depths, err := r.q.Depths(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for _, d := range depths {
		n += int(d)
	}
	return n
}

func (r *rig) reserve(key string) admission.Reservation {
	return r.gate.Reserve(admission.Request{Key: key}, r.clock.Now())
}

const (
	reject = "policies:\n  - name: p\n    outflow: 1/s\n    queue: 2\n"
	defer_ = "policies:\n  - name: p\n    outflow: 1/s\n    queue: 2\n    overflow: defer\n"
)

// TestGateOutcomes drives the one admission decision through every outcome
// and every step of a Reservation.
func TestGateOutcomes(t *testing.T) {
	for _, c := range []struct {
		name string
		yaml string
		cfg  admission.Config
		run  func(t *testing.T, r *rig)
	}{
		{"accepted: stored, with the key's depth and the job's ETA", reject, admission.Config{}, func(t *testing.T, r *rig) {
			if res := r.reserve("k"); res.Step != admission.StoreJob || res.Job.Key != "k" {
				t.Errorf("Reserve of an empty key = step %d job %+v, want StoreJob of key k", res.Step, res.Job)
			}
			d1, d2 := r.admit("k"), r.admit("k")
			if d1.Outcome != admission.Accepted || d1.ID == "" || d1.Queued != 1 || d1.ETA != 0 {
				t.Errorf("first job = %+v, want accepted, queued 1, due now", d1)
			}
			if d2.Outcome != admission.Accepted || d2.Queued != 2 || d2.ETA != time.Second || d2.Limits.Remaining != 0 {
				t.Errorf("second job = %+v, want accepted, queued 2, due in 1s, no slot left", d2)
			}
		}},
		{"full: the store refuses, then the gate knows without asking", reject, admission.Config{}, func(t *testing.T, r *rig) {
			r.admit("k")
			r.admit("k")
			r.advance(0) // the first job is delivered; its slot frees at its outflow slot's end
			d := r.admit("k")
			if d.Outcome != admission.Full || d.RetryAfter <= 0 || d.RetryAfter > time.Second || !strings.Contains(d.Reason, "is full") {
				t.Fatalf("third job = %+v, want full, come back within 1s", d)
			}
			res := r.reserve("k")
			if res.Step != admission.Decided || res.Decision.Outcome != admission.Full {
				t.Errorf("Reserve after a refusal = step %d %+v, want decided full without the store", res.Step, res.Decision)
			}
			r.advance(d.RetryAfter)
			if d := r.admit("k"); d.Outcome != admission.Accepted {
				t.Errorf("after Retry-After = %+v, want accepted", d)
			}
			if got := r.gate.Counts(); got.Rejected != 2 || got.Admitted != 3 {
				t.Errorf("counts = %+v, want 3 admitted, 2 rejected", got)
			}
		}},
		{"full: a queue size lowered live over stored jobs", reject, admission.Config{}, func(t *testing.T, r *rig) {
			r.admit("k")
			p := *r.gate.Policy()
			p.Queue = 1
			if err := r.gate.SetPolicy(p); err != nil {
				t.Fatal(err)
			}
			if d := r.admit("k"); d.Outcome != admission.Full {
				t.Errorf("with the queue lowered to 1 over 1 job = %+v, want full (the store still has room for 2)", d)
			}
			if depth := r.stored(); depth != 1 {
				t.Errorf("queue holds %d jobs, want 1", depth)
			}
		}},
		{"deferred, then re-admitted in submission order", defer_, admission.Config{}, func(t *testing.T, r *rig) {
			a, b := r.admit("k"), r.admit("k")
			c := r.admit("k")
			if c.Outcome != admission.Deferred || c.ID == "" || c.RetryAfter <= 0 {
				t.Fatalf("job over a full key of a defer policy = %+v, want deferred with an id and a time", c)
			}
			if res := r.reserve("k"); res.Step != admission.Block {
				t.Errorf("Reserve with deferred jobs ahead = step %d, want Block (deferring waits on the store)", res.Step)
			}
			// A slot frees before the deferred drainer looks: a fresh job
			// must not take it from the deferred one.
			token, _ := queue.EncodeKey("k")
			for r.main.Key(token, r.clock.Now()).Queued >= 2 {
				r.main.Advance(context.Background(), r.clock.add(100*time.Millisecond))
			}
			d := r.admit("k")
			if d.Outcome != admission.Deferred {
				t.Errorf("fresh job while a deferred one waits = %+v, want deferred behind it", d)
			}
			for range 8 {
				r.advance(time.Second)
			}
			want := []string{a.ID, b.ID, c.ID, d.ID}
			if !equal(r.delivered, want) {
				t.Errorf("delivered %v, want %v (submission order)", r.delivered, want)
			}
			if !equal(r.readmitted, []string{c.ID, d.ID}) || r.gate.Counts().Readmitted != 2 {
				t.Errorf("re-admitted %v (count %d), want %s then %s", r.readmitted, r.gate.Counts().Readmitted, c.ID, d.ID)
			}
		}},
		{"limited: the admission limit refuses; Reserve must block", reject + "    admit: {algorithm: gcra, limit: 1/m}\n", admission.Config{}, func(t *testing.T, r *rig) {
			if res := r.reserve("k"); res.Step != admission.Block {
				t.Errorf("Reserve with an admission limit = step %d, want Block", res.Step)
			}
			if d := r.admit("k"); d.Outcome != admission.Accepted {
				t.Fatalf("first job = %+v, want accepted", d)
			}
			d := r.admit("k")
			if d.Outcome != admission.Limited || d.RetryAfter < 59*time.Second || !strings.Contains(d.Reason, "admission limit") {
				t.Errorf("second job within the minute = %+v, want limited for about a minute", d)
			}
			if r.stored() != 1 {
				t.Errorf("queue holds %d jobs, want 1", r.stored())
			}
		}},
		{"unavailable: the limiter's Redis is dead and the policy fails closed",
			reject + "    admit: {algorithm: gcra, limit: 5/s, fail: closed}\n",
			admission.Config{Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})},
			func(t *testing.T, r *rig) {
				d := r.admit("k")
				if d.Outcome != admission.Unavailable || d.RetryAfter < admission.DefaultUnavailableWait {
					t.Errorf("with Redis dead = %+v, want unavailable, come back in ≥1s", d)
				}
				if r.stored() != 0 || r.gate.Counts().LimiterErrors != 1 {
					t.Errorf("queue holds %d jobs, %d limiter errors; want 0 and 1", r.stored(), r.gate.Counts().LimiterErrors)
				}
			}},
		{"invalid: a bad key, an oversized payload", reject, admission.Config{}, func(t *testing.T, r *rig) {
			for _, c := range []struct {
				key     string
				payload []byte
				want    error
			}{{"", nil, queue.ErrBadKey}, {strings.Repeat("k", 300), nil, queue.ErrBadKey}, {"k", make([]byte, 65), queue.ErrTooLarge}} {
				res := r.gate.Reserve(admission.Request{Key: c.key, Payload: c.payload}, r.clock.Now())
				if res.Step != admission.Decided || res.Decision.Outcome != admission.Invalid || !errors.Is(res.Decision.Err, c.want) {
					t.Errorf("Reserve(key %.10q, %d bytes) = step %d %+v, want decided invalid: %v", c.key, len(c.payload), res.Step, res.Decision, c.want)
				}
			}
			if r.stored() != 0 {
				t.Errorf("queue holds %d jobs, want 0", r.stored())
			}
		}},
		{"settle: the store's refusal of a defer policy's job defers it", defer_, admission.Config{}, func(t *testing.T, r *rig) {
			r.admit("k")
			r.admit("k")
			res := r.reserve("other") // an unseen key: the gate must ask the store
			if res.Step != admission.StoreJob {
				t.Fatalf("Reserve = step %d, want StoreJob", res.Step)
			}
			res2 := r.reserve("k") // the drainer counts k full, but only the store knows for sure
			if res2.Step != admission.StoreJob {
				t.Fatalf("Reserve of the full key = step %d, want StoreJob", res2.Step)
			}
			rec, err := r.q.Admit(context.Background(), res2.Job)
			if !errors.Is(err, queue.ErrFull) || !res2.SettleBlocks(err) {
				t.Fatalf("store answer %v: SettleBlocks = %v, want a refusal that blocks", err, res2.SettleBlocks(err))
			}
			if d := r.gate.Settle(context.Background(), &res2, rec, err); d.Outcome != admission.Deferred || d.ID == "" {
				t.Errorf("Settle of the refusal = %+v, want deferred", d)
			}
			rec, err = r.q.Admit(context.Background(), res.Job)
			if d := r.gate.Settle(context.Background(), &res, rec, err); d.Outcome != admission.Accepted || d.ID != rec.ID {
				t.Errorf("Settle of the stored job = %+v, want accepted with id %s", d, rec.ID)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newRig(t, c.yaml, c.cfg)) })
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A store's refusal that races with the key's slot freeing (the store
// refused while the drainer removed the job before it) says to come back at
// once, not at the key's next slot an hour away; nor does the gate then
// answer full from memory.
func TestGateRefusalRacingAFreedSlot(t *testing.T) {
	r := newRig(t, "policies:\n  - name: p\n    outflow: 1/h\n    queue: 1\n", admission.Config{})
	r.admit("k")
	r.advance(0)           // delivered: its slot is held for a second, the key's next slot is in an hour
	r.advance(time.Second) // the slot frees
	res := r.reserve("k")
	if res.Step != admission.StoreJob {
		t.Fatalf("Reserve of an empty key = step %d %+v, want StoreJob", res.Step, res.Decision)
	}
	d := r.gate.Settle(context.Background(), &res, queue.Receipt{}, queue.ErrFull) // refused before the removal
	if d.Outcome != admission.Full || d.RetryAfter > time.Millisecond {
		t.Errorf("a refusal while the drainer sees the key empty = %+v, want full, come back in 1 ms", d)
	}
	if d := r.admit("k"); d.Outcome != admission.Accepted {
		t.Errorf("at once after = %+v, want accepted (not full from memory)", d)
	}
}

// staleView is a drainer's view of a key as it was at a moment: a drainer
// that has not yet seen the jobs stored since.
type staleView struct {
	admission.View
	st drain.KeyStatus
}

func (v staleView) Key(string, time.Time) drain.KeyStatus { return v.st }

// A refusal by a store asked after the drainer freed the key's last slot
// did not race with that slot: the drainer has not yet seen the job that
// took it, so the answer is the key's next slot, an hour away, not 1 ms.
func TestGateRefusalAheadOfTheDrainer(t *testing.T) {
	r := newRig(t, "policies:\n  - name: p\n    outflow: 1/h\n    queue: 1\n", admission.Config{})
	r.admit("k")
	r.advance(0)           // delivered: its slot is held for a second, the key's next slot is in an hour
	r.advance(time.Second) // the slot frees
	token, err := queue.EncodeKey("k")
	if err != nil {
		t.Fatal(err)
	}
	before := r.main.Key(token, r.clock.Now())
	if before.Queued != 0 || before.FreedAt.IsZero() {
		t.Fatalf("the drainer's view once the slot freed = %+v, want the key empty and when it freed", before)
	}
	r.clock.add(time.Millisecond)
	if d := r.admit("k"); d.Outcome != admission.Accepted {
		t.Fatalf("into the freed slot = %+v, want accepted", d)
	}
	r.gate.Attach(staleView{r.main, before}, r.dfr)
	d := r.admit("k")
	if d.Outcome != admission.Full || d.RetryAfter < 30*time.Minute || d.RetryAfter > time.Hour+time.Second {
		t.Errorf("a refusal the drainer has not caught up with = %+v, want full, come back in about an hour", d)
	}
	if d := r.admit("k"); d.Outcome != admission.Full || d.RetryAfter < 30*time.Minute {
		t.Errorf("at once after = %+v, want full from memory, about an hour", d)
	}
}

// While the drainer is removing a delivered job whose hold has ended (the
// removal done in the store, not yet counted), a refusal means a job took
// the freed slot already when the drainer sees more jobs than fit: come
// back after the key's next attempt, an hour away; and a refusal while
// the others leave room raced with the removal: come back at once.
func TestGateRefusalWhileASlotIsFreed(t *testing.T) {
	t0 := time.Now()
	for _, tc := range []struct {
		name      string
		st        drain.KeyStatus
		min, most time.Duration
	}{
		{"a job took the freed slot", drain.KeyStatus{Queued: 2, Waiting: 1, Seen: 2, Freeing: 1, RoomIn: time.Hour + time.Second}, 30 * time.Minute, time.Hour + time.Second},
		{"raced with the removal", drain.KeyStatus{Queued: 1, Seen: 1, Freeing: 1, RoomIn: time.Hour + time.Second, FreedAt: t0.Add(-time.Hour)}, 0, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "policies:\n  - name: p\n    outflow: 1/h\n    queue: 1\n", admission.Config{})
			r.admit("k") // the store is full
			r.gate.Attach(staleView{r.main, tc.st}, r.dfr)
			d := r.admit("k")
			if d.Outcome != admission.Full || d.RetryAfter < tc.min || d.RetryAfter > tc.most {
				t.Errorf("refused with the drainer's view %+v: %+v, want full, come back in %v to %v", tc.st, d, tc.min, tc.most)
			}
		})
	}
}
