package drain_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// slowReads is a queue whose reads of a job take delay each, counted: the
// reads of a drainer starting on a queue that holds many keys' jobs.
type slowReads struct {
	drain.Queue
	delay time.Duration
	reads atomic.Int64
}

func (q *slowReads) Get(ctx context.Context, token string, seq uint64) (*queue.Msg, error) {
	elapse(q.delay)
	q.reads.Add(1)
	return q.Queue.Get(ctx, token, seq)
}

// TestStartDeliversWhileReading starts a drainer on a queue holding one job
// on each of many keys, whose reads take a while: it must deliver each
// key's job soon after reading it, in the order the keys fell due, rather
// than read every key's head before delivering (a key read stays behind
// every read that fell due before its answer came, and a scheduler handing
// out every due key at once keeps them all busy). At start-up on 100,000
// keys the drain delivered a few thousand jobs in its first 9 s that way,
// and then the rest (integration/bench/startup).
func TestStartDeliversWhileReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys, workers = 400, 4
		mq, err := drain.NewMemQueue("p", 10, drain.MemQueueConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			key := fmt.Sprintf("k%03d", i)
			if _, err := mq.Admit(context.Background(), queue.Job{ID: key, Key: key}); err != nil {
				t.Fatal(err)
			}
		}
		q := &slowReads{Queue: mq, delay: time.Millisecond}
		sink := newRecorder()
		var (
			mu        sync.Mutex
			delivered int
			ahead     int // the most heads read and not yet delivered, at a delivery
			firstAt   time.Duration
		)
		start := time.Now()
		sink.setFail(func(*drain.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			delivered++
			if delivered == 1 {
				firstAt = time.Since(start)
			}
			ahead = max(ahead, int(q.reads.Load())-delivered)
			return nil
		})
		d := drain.New(q, sink, drain.Pace{Interval: 100 * time.Millisecond}, drain.Config{Workers: workers})
		t.Cleanup(d.Stop)
		d.Start(t.Context())
		ds := sink.wait(t, keys, time.Minute)
		mu.Lock()
		defer mu.Unlock()
		// A worker's step reads a head; a few more are read while the
		// scheduler hands the key over for its delivery.
		if ahead > 3*workers {
			t.Errorf("up to %d heads read and not delivered at a delivery, want at most %d (%d workers): reads ran ahead of deliveries", ahead, 3*workers, workers)
		}
		if want := 10 * time.Millisecond; firstAt > want {
			t.Errorf("first delivery after %v, want within %v (reads take %v, %d at a time)", firstAt, want, q.delay, workers)
		}
		seen := map[string]bool{}
		for _, x := range ds {
			if seen[x.id] {
				t.Errorf("job %s delivered twice", x.id)
			}
			seen[x.id] = true
		}
	})
}
