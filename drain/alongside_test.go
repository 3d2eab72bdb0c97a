package drain_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// roundTrips is a MemQueue whose reads and removals take rtt each, as a
// JetStream request does, counted.
type roundTrips struct {
	*drain.MemQueue
	rtt            time.Duration
	reads, removes atomic.Int64
}

func (q *roundTrips) Get(ctx context.Context, token string, seq uint64) (*queue.Msg, error) {
	elapse(q.rtt)
	q.reads.Add(1)
	return q.MemQueue.Get(ctx, token, seq)
}

func (q *roundTrips) Remove(ctx context.Context, seq uint64) error {
	elapse(q.rtt)
	q.removes.Add(1)
	return q.MemQueue.Remove(ctx, seq)
}

// A started drainer reads a key's next head alongside the removal and the
// hand-over, not after them: with every queue call and every delivery
// taking one round trip, a backlogged key whose slots do not bind delivers
// every two round trips (free the previous job, hand over), not every
// three. Its jobs still go in order, each once, and a job goes only once
// the one delivered before it is removed.
func TestHeadReadAlongsideDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const jobs, rtt = 20, 10 * time.Millisecond
		q := newRoundTrips(t, rtt)
		sink := newRecorder()
		var removedBefore []int64
		var mu sync.Mutex
		sink.setFail(func(*drain.Delivery) error {
			mu.Lock()
			removedBefore = append(removedBefore, q.removes.Load())
			mu.Unlock()
			elapse(rtt)
			return nil
		})
		ids := admitN(t, q.MemQueue, "k", jobs)
		d := drain.New(q, sink, drain.Pace{Interval: time.Millisecond}, drain.Config{})
		t.Cleanup(d.Stop)
		start := time.Now()
		d.Start(t.Context())
		ds := sink.wait(t, jobs, time.Minute)
		took := ds[jobs-1].at.Sub(ds[0].at)
		if per := took / (jobs - 1); per > 2*rtt {
			t.Errorf("a delivery every %v (the last %v after the first), want every %v: the head is read after the hand-over, not alongside it", per, took, 2*rtt)
		}
		checkFIFO(t, "k", ds, ids)
		mu.Lock()
		defer mu.Unlock()
		for i, n := range removedBefore {
			if n < int64(i) {
				t.Fatalf("job %d handed over with %d of the %d jobs before it removed", i, n, i)
			}
		}
		t.Logf("%d jobs in %v (first after %v)", jobs, took, ds[0].at.Sub(start))
	})
}

// A read alongside a hand-over that fails is dropped (the job stays the
// head, and goes again), and a head whose last attempt failed is not read
// alongside at all: a downstream failing for a while costs the queue no
// read per retry.
func TestNoReadAlongsideRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const jobs, fails, rtt = 5, 4, time.Millisecond
		q := newRoundTrips(t, rtt)
		sink := newRecorder()
		var failed atomic.Int64
		sink.setFail(func(d *drain.Delivery) error {
			if d.Msg.ID == "k-1" && failed.Add(1) <= fails {
				return errors.New("downstream down")
			}
			return nil
		})
		ids := admitN(t, q.MemQueue, "k", jobs)
		pace := drain.Pace{Interval: time.Millisecond, Retry: drain.Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}}
		d := drain.New(q, sink, pace, drain.Config{Jitter: func() float64 { return 1 }})
		t.Cleanup(d.Stop)
		d.Start(t.Context())
		ds := sink.wait(t, jobs, time.Minute)
		checkFIFO(t, "k", ds, ids)
		if tries := len(sink.tries()); tries != jobs+fails {
			t.Errorf("%d attempts, want %d", tries, jobs+fails)
		}
		// Each job is read once, and the job after k-1 once more: alongside
		// k-1's first attempt, which failed.
		if reads := q.reads.Load(); reads != jobs+1 {
			t.Errorf("%d reads for %d jobs and %d failed attempts of one, want %d", reads, jobs, fails, jobs+1)
		}
	})
}

func newRoundTrips(t *testing.T, rtt time.Duration) *roundTrips {
	t.Helper()
	mq, err := drain.NewMemQueue("p", 100, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &roundTrips{MemQueue: mq, rtt: rtt}
}

// admitN stores n jobs of key in q, with ids <key>-0, <key>-1…, and returns
// the ids.
func admitN(t *testing.T, q *drain.MemQueue, key string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", key, i)
		if _, err := q.Admit(context.Background(), queue.Job{ID: ids[i], Key: key, Payload: []byte(ids[i])}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}
