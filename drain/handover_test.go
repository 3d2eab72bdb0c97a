package drain_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// A partition handed over gracefully between two Groups on one JetStream
// queue (two shapers): the first releases it (its deliveries in flight end
// and the slots of its delivered jobs are freed), the second takes it, and
// no job is delivered twice; the second delivers again at once, and every
// job is delivered.
func TestGroupHandOverOnJetStream(t *testing.T) {
	const parts, keys, perKey = 4, 200, 4
	p := policy(t, "2/s", 10)
	r := newRig(t, p, drain.NATSConfig{})
	r.d.Stop() // the rig's own drainer: two Groups drain here instead
	var all []string
	for k := range keys {
		all = append(all, r.admit(fmt.Sprintf("k%03d", k), perKey)...)
	}
	a := drain.NewGroup(r.q, parts, r.sink(drain.NATSConfig{}), paceOf(p), drain.Config{Passive: true})
	b := drain.NewGroup(r.q, parts, r.sink(drain.NATSConfig{}), paceOf(p), drain.Config{Passive: true})
	t.Cleanup(a.Stop)
	t.Cleanup(b.Stop)
	ctx := context.Background()
	a.Start(ctx)
	b.Start(ctx)
	a.SetAllActive(true)
	r.wait(keys*2, 30*time.Second) // every key's first two jobs (one second)

	const moved = 2
	ctxR, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := a.Part(moved).Release(ctxR); err != nil {
		t.Fatalf("Release: %v", err)
	}
	released := time.Since(start)
	before := len(r.deliveries())
	taken := time.Now()
	b.SetActive(moved, true)
	var first time.Duration
	waitFor(t, 10*time.Second, "the new holder's first delivery", func() bool {
		for _, d := range r.deliveries()[before:] {
			if tok, _ := queue.EncodeKey(d.key); drain.PartitionOf(tok, parts) == moved {
				first = d.at.Sub(taken)
				return true
			}
		}
		return false
	})
	t.Logf("partition %d released in %v (deliveries in flight ended, delivered jobs' slots freed); the new holder delivered %v after taking it",
		moved, released.Round(time.Millisecond), first.Round(time.Millisecond))
	if first > 500*time.Millisecond {
		t.Errorf("the new holder's first delivery came %v after it took the partition, want within a slot (500ms)", first)
	}
	ds := r.wait(len(all), 60*time.Second)
	seen := map[string]int{}
	for _, d := range ds {
		seen[d.id]++
		if seen[d.id] > 1 {
			t.Errorf("job %s delivered twice across a graceful hand-over", d.id)
		}
	}
}

// A passive partition counts its keys' jobs from a count of the queue that
// the partitions share (resync); a count read before a job the partition
// was told of must not serve it. It would keep, of the key's jobs, as many
// of the newest as the count says are left, dropping a job still stored
// instead of an older one gone: taken over, the partition would deliver
// the key's later job and leave that one stranded.
func TestGroupRecountsAfterTheJobsItWasToldOf(t *testing.T) {
	clock, q := virtualQueue(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var got []string
	sink := sinkFunc(func(_ context.Context, d *drain.Delivery) error {
		got = append(got, d.Msg.ID)
		return nil
	})
	g := drain.NewGroup(q, 2, sink, drain.Pace{Interval: 100 * time.Millisecond}, drain.Config{Clock: clock, Passive: true})
	defer g.Stop()
	ctx := context.Background()
	g.Advance(ctx, clock.Now()) // the watch starts
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); drain.PartitionOf(tokenOf(t, k), 2) == 1 {
			key = k
		}
	}
	admit := func(id string) {
		if _, err := q.Admit(ctx, queue.Job{ID: id, Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	admit("first")
	g.Part(0).ResyncNow(ctx) // the queue's counts, read now: one job of key
	admit("second")
	g.Part(1).ResyncNow(ctx) // told of both jobs: the count above must not serve
	g.SetAllActive(true)
	advanceAll(ctx, g, clock)
	if want := []string{"first", "second"}; !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
}

// A hand-over keeps each key's place in the total cap's rounds: the next
// drainer, told the keys' last starts and places under the cap
// (LastStarts, KeepPace, CapOrder, KeepCapOrder), starts each key's next
// job in the slot the first drainer had reserved for it, not in the next
// slot free: the answers producers were given before the hand-over come
// true.
func TestHandOverKeepsTheCapsRounds(t *testing.T) {
	t0, clock, q, a, b, got := capRig(t)
	ctx := context.Background()
	for k := range 4 {
		admitJob(t, q, fmt.Sprint("k", k), fmt.Sprint("k", k))
	}
	a.Advance(ctx, t0) // k0 starts; k1, k2, k3 get the cap's next slots
	want := map[string]time.Duration{"k0": 0, "k1": 500 * time.Millisecond, "k2": time.Second, "k3": 1500 * time.Millisecond}
	for k := 1; k < 4; k++ { // what a producer was told
		id := fmt.Sprint("k", k)
		if in := a.StartIn(tokenOf(t, id), 1, t0); in != want[id] {
			t.Fatalf("StartIn(%s) = %v, want %v", id, in, want[id])
		}
	}
	clock.set(t0.Add(100 * time.Millisecond))
	handOver(t, a, b, clock, 0)
	advanceAll(ctx, b, clock)
	for id, at := range want {
		if got[id] != at {
			t.Errorf("%s started at %v, want %v (the slot the first drainer reserved)", id, got[id], at)
		}
	}
}

// A passive partition sees every job stored but not the removals of the
// partition's drainer on another shaper; Recount, when it is taken over,
// reads its keys' depths afresh.
func TestGroupRecount(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock, q := virtualQueue(t, t0)
	pace := drain.Pace{Interval: 100 * time.Millisecond}
	a := drain.New(q, sinkFunc(func(context.Context, *drain.Delivery) error { return nil }), pace, drain.Config{Clock: clock})
	b := drain.NewGroup(q, 2, sinkFunc(func(context.Context, *drain.Delivery) error { return nil }), pace, drain.Config{Clock: clock, Passive: true})
	startDriven(t, t0, a, b)
	ctx := context.Background()
	for i := range 3 {
		admitJob(t, q, fmt.Sprint("j", i), "k")
	}
	advanceAll(ctx, a, clock) // a delivers every job and frees its slot
	tok := tokenOf(t, "k")
	if got := b.Key(tok, clock.Now()).Queued; got != 3 {
		t.Fatalf("passive Queued = %d before Recount, want 3 (it saw the jobs stored, not their removal): the rig is wrong", got)
	}
	b.Recount(ctx, drain.PartitionOf(tok, 2))
	if got := b.Key(tok, clock.Now()).Queued; got != 0 {
		t.Errorf("Queued after Recount = %d, want 0", got)
	}
}

// virtualQueue returns a MemQueue of 10 jobs per key on a virtual clock
// reading start.
func virtualQueue(t *testing.T, start time.Time) (*virtualClock, *drain.MemQueue) {
	t.Helper()
	clock := &virtualClock{now: start}
	q, err := drain.NewMemQueue("p", 10, drain.MemQueueConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return clock, q
}

// driven is a Drainer or a Group driven on a virtual clock.
type driven interface {
	Advance(ctx context.Context, now time.Time) (time.Time, bool)
	Stop()
}

// startDriven makes each of ds a driven one at t0 (their watches of the
// queue start), stopped when the test ends.
func startDriven(t *testing.T, t0 time.Time, ds ...driven) {
	for _, d := range ds {
		t.Cleanup(d.Stop)
		d.Advance(context.Background(), t0)
	}
}

// advanceAll drives d on clock until it has nothing left to do.
func advanceAll(ctx context.Context, d driven, clock *virtualClock) {
	for {
		next, ok := d.Advance(ctx, clock.Now())
		if !ok {
			return
		}
		clock.set(next)
	}
}

// admitJob stores job id of key in q.
func admitJob(t *testing.T, q *drain.MemQueue, id, key string) {
	t.Helper()
	if _, err := q.Admit(context.Background(), queue.Job{ID: id, Key: key}); err != nil {
		t.Fatal(err)
	}
}
