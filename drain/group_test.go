package drain_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// groupRig is a MemQueue drained by a Group of n partitions into a
// recorder.
type groupRig struct {
	*memRig
	g *drain.Group
}

func newGroupRig(t *testing.T, n int, pace drain.Pace, cfg drain.Config) *groupRig {
	t.Helper()
	q, err := drain.NewMemQueue("p", 100, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r := &groupRig{memRig: &memRig{t: t, q: q, sink: newRecorder()}}
	r.g = drain.NewGroup(q, n, r.sink, pace, cfg)
	t.Cleanup(r.g.Stop)
	return r
}

func tokenOf(t *testing.T, key string) string {
	t.Helper()
	tok, err := queue.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestPartitionOfSpreadsKeys(t *testing.T) {
	const n, keys = 8, 8000
	count := make([]int, n)
	for i := range keys {
		p := drain.PartitionOf(fmt.Sprintf("tenant-%d", i), n)
		if p < 0 || p >= n {
			t.Fatalf("PartitionOf = %d, want [0,%d)", p, n)
		}
		count[p]++
	}
	for p, c := range count {
		if math.Abs(float64(c)-keys/n) > 0.1*keys/n {
			t.Errorf("partition %d holds %d keys of %d, want %d ± 10 %%", p, c, keys, keys/n)
		}
	}
	if drain.PartitionOf("anything", 1) != 0 {
		t.Error("one partition: want 0")
	}
}

// Each partition delivers its own keys only, at the key's rate, once it
// is active; the others' keys wait, and every job is delivered once, in
// order, when all are active.
func TestGroupPartitionsDeliverTheirKeysOnly(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			const n = 4
			r := newGroupRig(t, n, drain.Pace{Interval: 100 * time.Millisecond}, drain.Config{Passive: true, Workers: 8})
			keys := make([]string, 16)
			ids := map[string][]string{}
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
				ids[keys[i]] = r.admit(keys[i], 5)
			}
			r.g.Start(context.Background())
			r.g.SetActive(1, true)
			elapse(time.Second)
			for _, d := range r.sink.deliveries() {
				if p := drain.PartitionOf(tokenOf(t, d.key), n); p != 1 {
					t.Fatalf("key %s of partition %d delivered while only partition 1 is active", d.key, p)
				}
			}
			if got := r.g.ActiveParts(); len(got) != 1 || got[0] != 1 {
				t.Errorf("ActiveParts = %v, want [1]", got)
			}
			r.g.SetAllActive(true)
			r.sink.wait(t, 16*5, 10*time.Second)
			for key, ds := range byKey(r.sink.deliveries()) {
				checkFIFO(t, key, ds, ids[key])
				for i := 1; i < len(ds); i++ {
					if gap := ds[i].at.Sub(ds[i-1].at); gap < 100*time.Millisecond {
						t.Errorf("key %s: gap %v, want ≥ 100ms", key, gap)
					}
				}
			}
			elapse(time.Second) // delivered jobs hold their slots one interval
			if st := r.g.Stats(); st.Delivered != 80 || st.Queued != 0 {
				t.Errorf("Stats = %+v, want 80 delivered, 0 queued", st)
			}
		})
	})
}

// The total cap is shared out: n partitions together never exceed it, and
// each key's answers come from its own partition's schedule.
func TestGroupSharesTheTotalCap(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			const n = 4
			pace := drain.Pace{Interval: 10 * time.Millisecond, Total: 100 * time.Millisecond} // 10/s in all
			r := newGroupRig(t, n, pace, drain.Config{})
			for i := range 40 {
				r.admit(fmt.Sprintf("k%d", i), 3)
			}
			r.g.Start(context.Background())
			if !r.g.AwaitSeen(context.Background(), 120) {
				t.Fatal("AwaitSeen(120) = false")
			}
			key := "k7"
			part := r.g.Part(drain.PartitionOf(tokenOf(t, key), n))
			now := time.Now()
			if a, b := r.g.StartIn(tokenOf(t, key), 3, now), part.StartIn(tokenOf(t, key), 3, now); a != b {
				t.Errorf("Group.StartIn = %v, its partition's = %v", a, b)
			}
			ds := r.sink.wait(t, 120, time.Minute)
			if w := maxInWindow(ds, time.Second); w > 10+n {
				t.Errorf("%d deliveries in one second, want ≤ 10 (+1 per partition for the window's edge)", w)
			}
			if span := ds[len(ds)-1].at.Sub(ds[0].at); span < 11*time.Second {
				t.Errorf("120 deliveries under a 10/s total took %v, want ≥ 11.9s", span)
			}
		})
	})
}

// A driven Group (a replay) delivers exactly as a started one would, and
// is told of every job from the call storing it.
func TestGroupAdvance(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &virtualClock{now: t0}
	q, err := drain.NewMemQueue("p", 10, drain.MemQueueConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var log []string
	sink := sinkFunc(func(_ context.Context, d *drain.Delivery) error {
		log = append(log, fmt.Sprintf("%v %s", clock.Now().Sub(t0), d.Msg.ID))
		return nil
	})
	g := drain.NewGroup(q, 3, sink, drain.Pace{Interval: 100 * time.Millisecond}, drain.Config{Clock: clock})
	defer g.Stop()
	for i := range 6 {
		key := fmt.Sprintf("k%d", i)
		for j := range 2 {
			if _, err := q.Admit(context.Background(), queue.Job{ID: fmt.Sprintf("%s-%d", key, j), Key: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for {
		next, ok := g.Advance(context.Background(), clock.Now())
		if !ok {
			break
		}
		clock.set(next)
	}
	if len(log) != 12 {
		t.Fatalf("%d deliveries, want 12: %v", len(log), log)
	}
	at := map[string]bool{}
	for _, l := range log {
		at[l] = true
	}
	for i := range 6 {
		for j, when := range []string{"0s", "100ms"} {
			if l := fmt.Sprintf("%s k%d-%d", when, i, j); !at[l] {
				t.Errorf("missing %q in %v", l, log)
			}
		}
	}
}

// sinkFunc makes a function a Sink.
type sinkFunc func(ctx context.Context, d *drain.Delivery) error

func (f sinkFunc) Deliver(ctx context.Context, d *drain.Delivery) error { return f(ctx, d) }
