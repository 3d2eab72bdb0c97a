package drain_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// readCountingQueue is a MemQueue that reports jobs whole from its watch
// and counts the reads of a job by sequence (Get).
type readCountingQueue struct {
	*drain.MemQueue
	gets atomic.Int64
}

func (q *readCountingQueue) Get(ctx context.Context, token string, seq uint64) (*queue.Msg, error) {
	q.gets.Add(1)
	return q.MemQueue.Get(ctx, token, seq)
}

// watchedRig is a queue reporting jobs whole and counting reads, on a
// virtual clock, and a sink noting each delivery by job id.
func watchedRig(t *testing.T) (t0 time.Time, clock *virtualClock, q *readCountingQueue, sink drain.Sink, got map[string]int) {
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock = &virtualClock{now: t0}
	mq, err := drain.NewMemQueue("p", 100, drain.MemQueueConfig{Clock: clock, WatchJobs: true})
	if err != nil {
		t.Fatal(err)
	}
	q = &readCountingQueue{MemQueue: mq}
	got = map[string]int{}
	sink = sinkFunc(func(_ context.Context, d *drain.Delivery) error {
		got[d.Msg.ID]++
		return nil
	})
	return t0, clock, q, sink, got
}

// An active drainer whose keys read their next jobs as soon as the one
// before is delivered takes them from the watch: no job is read again.
// Jobs reported while it is passive, and those of keys whose slots are far
// apart (read shortly before their slot, so that a key waiting holds no
// job) but the job an idle key reads at once, are read as before.
func TestWatchedJobsNeedNoRead(t *testing.T) {
	for _, c := range []struct {
		name      string
		interval  time.Duration
		passive   bool
		wantReads int64
	}{
		{"close slots", 10 * time.Millisecond, false, 0},
		{"reported while passive", 10 * time.Millisecond, true, 20},
		{"far slots", time.Second, false, 16}, // each key's first job is read at once: kept
	} {
		t.Run(c.name, func(t *testing.T) {
			t0, clock, q, sink, got := watchedRig(t)
			d := drain.New(q, sink, drain.Pace{Interval: c.interval}, drain.Config{Clock: clock, Passive: c.passive})
			startDriven(t, t0, d)
			for i := range 20 {
				admitJob(t, q.MemQueue, fmt.Sprint("j", i), fmt.Sprint("k", i%4))
			}
			d.SetActive(true)
			advanceAll(context.Background(), d, clock)
			if len(got) != 20 {
				t.Fatalf("delivered %d of 20 jobs", len(got))
			}
			if n := q.gets.Load(); n != c.wantReads {
				t.Errorf("%d jobs read from the queue, want %d", n, c.wantReads)
			}
			if c.interval >= time.Second {
				// A slow key with a job every slot or so: each found idle.
				q.gets.Store(0)
				now := clock.Now()
				for i := range 5 {
					clock.set(now.Add(time.Duration(i) * 2 * c.interval))
					admitJob(t, q.MemQueue, fmt.Sprint("s", i), "slow")
					advanceAll(context.Background(), d, clock)
				}
				if n := q.gets.Load(); n != 0 {
					t.Errorf("a key found idle by each of its 5 jobs: %d read from the queue, want 0", n)
				}
			}
		})
	}
}

// Jobs kept from the watch are forgotten when the drainer stops
// delivering (a released partition) or finds itself past its lease (a
// shaper frozen and woken): another drainer may deliver and remove them
// meanwhile, and the first, delivering again, must read them, find them
// gone, and deliver none of them twice.
func TestWatchedJobsForgottenWithTheDrain(t *testing.T) {
	for _, how := range []string{"released", "past its lease"} {
		t.Run(how, func(t *testing.T) {
			t0, clock, q, sink, got := watchedRig(t)
			ctx := context.Background()
			a := drain.New(q, sink, drain.Pace{Interval: 10 * time.Millisecond}, drain.Config{Clock: clock})
			b := drain.New(q, sink, drain.Pace{Interval: 10 * time.Millisecond}, drain.Config{Clock: clock, Passive: true})
			startDriven(t, t0, a, b)
			for i := range 8 {
				admitJob(t, q.MemQueue, fmt.Sprint("j", i), "k") // a keeps them: it delivers none yet
			}
			switch how {
			case "released":
				if err := a.Release(ctx); err != nil {
					t.Fatal(err)
				}
			case "past its lease":
				a.HoldUntil(t0)
				a.Advance(ctx, t0)
			}
			b.ResyncNow(ctx)
			b.SetActive(true)
			advanceAll(ctx, b, clock) // delivers and removes every job
			b.SetActive(false)
			switch how {
			case "released":
				a.SetActive(true) // not recounted (the count failed, say): it reads its jobs, and finds them gone
			case "past its lease":
				a.HoldUntil(clock.Now().Add(time.Hour))
			}
			advanceAll(ctx, a, clock)
			for id, n := range got {
				if n != 1 {
					t.Errorf("%s delivered %d times", id, n)
				}
			}
			if len(got) != 8 {
				t.Errorf("delivered %d of 8 jobs", len(got))
			}
		})
	}
}
