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

// A graceful hand-over under a binding total cap keeps the answers the
// first drainer gave: four keys at 1/s under a cap of 2/s, two jobs each
// and two more each gap later, handed over at every 100 ms of the first
// six seconds, the next drainer taking the keys at once or after a pause.
// Each job's answer (Stored, from the drainer delivering at the time)
// comes true no earlier than it said, and no later than the pause and one
// slot of the cap; the cap holds across the hand-over. Without the slots
// the cap had reserved (CapOrder, KeepCapOrder) a key with none reserved took
// the next drainer's first slot and came a second early.
func TestHandOverKeepsTheCapsPromises(t *testing.T) {
	const capSlot = 500 * time.Millisecond
	for h := time.Duration(0); h < 6*time.Second; h += 100 * time.Millisecond {
		for _, pause := range []time.Duration{0, 300 * time.Millisecond, 1500 * time.Millisecond} {
			for _, gap := range []time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second} {
				hand := handOverUnderCap(t, h, pause, gap)
				for _, j := range hand.jobs {
					if off := j.got.Sub(j.want); off < 0 || off > pause+capSlot {
						t.Fatalf("handed over at %v after a pause of %v, waves %v apart: %s started at %v, told %v (off %v; want 0 to %v)\n%s",
							h, pause, gap, j.id, j.got.Sub(hand.t0), j.want.Sub(hand.t0), off, pause+capSlot, hand)
					}
				}
				starts := hand.starts()
				for i := 1; i < len(starts); i++ {
					if d := starts[i].Sub(starts[i-1]); d < capSlot {
						t.Fatalf("handed over at %v after a pause of %v, waves %v apart: two starts %v apart under a cap of one per %v\n%s", h, pause, gap, d, capSlot, hand)
					}
				}
			}
		}
	}
}

type handedJob struct {
	id        string
	want, got time.Time
}

type handedOver struct {
	t0   time.Time
	jobs []handedJob
}

func (h handedOver) starts() []time.Time {
	var out []time.Time
	for _, j := range h.jobs {
		out = append(out, j.got)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

func (h handedOver) String() string {
	s := ""
	for _, j := range h.jobs {
		s += fmt.Sprintf("  %s told %v, started %v\n", j.id, j.want.Sub(h.t0), j.got.Sub(h.t0))
	}
	return s
}

// handOverUnderCap runs one case of TestHandOverKeepsTheCapsPromises: a
// delivers, releases its keys at h; b, told their last starts and slots,
// takes them pause later, as a shaper taking a partition over does.
func handOverUnderCap(t *testing.T, h, pause, gap time.Duration) handedOver {
	t0, clock, q, a, b, started := capRig(t)
	ctx := context.Background()
	type admission struct {
		at  time.Time
		key string
	}
	var plan []admission
	for w := range 2 {
		for j := range 8 {
			plan = append(plan, admission{t0.Add(time.Duration(w)*gap + time.Duration(j)*5*time.Millisecond), fmt.Sprint("k", j%4)})
		}
	}
	var jobs []handedJob
	cur, handAt, handed := a, t0.Add(h), false
	for {
		now := clock.Now()
		switch {
		case !handed && !now.Before(handAt):
			handOver(t, a, b, clock, pause)
			cur, handed = b, true
			continue
		case len(plan) > 0 && !now.Before(plan[0].at):
			id := fmt.Sprint("j", len(jobs))
			r, err := q.Admit(ctx, queue.Job{ID: id, Key: plan[0].key})
			if err != nil {
				t.Fatal(err)
			}
			a.Advance(ctx, now) // each sees the job stored
			b.Advance(ctx, now)
			_, in := cur.Stored(tokenOf(t, plan[0].key), r.Seq, now, 0)
			jobs = append(jobs, handedJob{id: id, want: now.Add(in)})
			plan = plan[1:]
			continue
		}
		next, ok := cur.Advance(ctx, now)
		if cur == a {
			b.Advance(ctx, now)
		} else {
			a.Advance(ctx, now)
		}
		if !ok && len(plan) == 0 && handed {
			break
		}
		if !ok {
			next = now.Add(time.Hour)
		}
		if len(plan) > 0 && plan[0].at.Before(next) {
			next = plan[0].at
		}
		if !handed && handAt.Before(next) {
			next = handAt
		}
		clock.set(maxOf(next, now))
	}
	for i := range jobs {
		jobs[i].got = t0.Add(started[jobs[i].id])
	}
	return handedOver{t0: t0, jobs: jobs}
}

func maxOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// The cap's interval holds across a hand-over with no slot reserved: a
// key's job stored just after the first drainer delivered another key's
// starts with the next drainer a cap slot after that delivery, not at
// once (CapOrder.Next).
func TestHandOverKeepsTheCapsInterval(t *testing.T) {
	t0, clock, q, a, b, got := capRig(t)
	ctx := context.Background()
	admitJob(t, q, "k0", "k0")
	a.Advance(ctx, t0) // k0 starts; the cap's next slot is at 500 ms
	clock.set(t0.Add(100 * time.Millisecond))
	handOver(t, a, b, clock, 0)
	clock.set(t0.Add(150 * time.Millisecond))
	admitJob(t, q, "k1", "k1")
	advanceAll(ctx, b, clock)
	if got["k0"] != 0 || got["k1"] != 500*time.Millisecond {
		t.Errorf("k0 started at %v, k1 at %v; want 0 and 500ms, a cap slot apart", got["k0"], got["k1"])
	}
}

// capRig is two drainers of one virtual-clock queue at 1/s per key under
// a cap of 2/s, a delivering and b passive, both driven, and when each
// job started (since t0) by id.
func capRig(t *testing.T) (t0 time.Time, clock *virtualClock, q *drain.MemQueue, a, b *drain.Drainer, got map[string]time.Duration) {
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock, q = virtualQueue(t, t0)
	got = map[string]time.Duration{}
	sink := sinkFunc(func(_ context.Context, d *drain.Delivery) error {
		got[d.Msg.ID] = clock.Now().Sub(t0)
		return nil
	})
	a = drain.New(q, sink, capPace, drain.Config{Clock: clock})
	b = drain.New(q, sink, capPace, drain.Config{Clock: clock, Passive: true})
	startDriven(t, t0, a, b)
	return t0, clock, q, a, b, got
}

// capPace is capRig's pace: four keys with jobs take a cap slot each in
// turn, a round of 2 s.
var capPace = drain.Pace{Interval: time.Second, Total: 500 * time.Millisecond}

// handOver hands a's keys over to b at the clock's time, after a pause,
// as shapers do with a partition: a releases them and leaves their last
// starts and places under the cap; b recounts, keeps them, and delivers.
func handOver(t *testing.T, a, b *drain.Drainer, clock *virtualClock, pause time.Duration) {
	t.Helper()
	ctx := context.Background()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	last := a.LastStarts(clock.Now().Add(-capPace.Interval))
	clock.set(clock.Now().Add(pause))
	b.Advance(ctx, clock.Now())
	b.ResyncNow(ctx) // what Group.Recount does on a partition taken over
	b.KeepPace(last)
	b.KeepCapOrder(a.CapOrder())
	b.SetActive(true)
}
