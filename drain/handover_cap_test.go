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
// the cap had reserved (CapSlots, KeepSlots) a key with none reserved took
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

type handOver struct {
	t0   time.Time
	jobs []handedJob
}

func (h handOver) starts() []time.Time {
	var out []time.Time
	for _, j := range h.jobs {
		out = append(out, j.got)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

func (h handOver) String() string {
	s := ""
	for _, j := range h.jobs {
		s += fmt.Sprintf("  %s told %v, started %v\n", j.id, j.want.Sub(h.t0), j.got.Sub(h.t0))
	}
	return s
}

// handOverUnderCap runs one case of TestHandOverKeepsTheCapsPromises: a
// delivers, releases its keys at h; b, told their last starts and slots,
// takes them pause later, as a shaper taking a partition over does.
func handOverUnderCap(t *testing.T, h, pause, gap time.Duration) handOver {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock, q := virtualQueue(t, t0)
	got := map[string]time.Time{}
	sink := sinkFunc(func(_ context.Context, d *drain.Delivery) error {
		got[d.Msg.ID] = clock.Now()
		return nil
	})
	pace := drain.Pace{Interval: time.Second, Total: 500 * time.Millisecond}
	a := drain.New(q, sink, pace, drain.Config{Clock: clock, Passive: true})
	b := drain.New(q, sink, pace, drain.Config{Clock: clock, Passive: true})
	ctx := context.Background()
	a.Advance(ctx, t0)
	b.Advance(ctx, t0)
	defer a.Stop()
	defer b.Stop()
	a.SetActive(true)
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
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			last := a.LastStarts(now.Add(-pace.Interval))
			clock.set(now.Add(pause))
			b.Advance(ctx, clock.Now())
			b.ResyncNow(ctx) // what Group.Recount does on a partition taken over
			b.KeepPace(last)
			b.KeepSlots(a.CapSlots())
			b.SetActive(true)
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
		jobs[i].got = got[jobs[i].id]
	}
	return handOver{t0: t0, jobs: jobs}
}

func maxOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
