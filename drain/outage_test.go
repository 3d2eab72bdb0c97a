package drain_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// electing is a MemQueue that, while down, answers no read, removal or
// LastSeq: each waits for its 2 s timeout (or its ctx) and fails as
// unavailable, as a JetStream request does while the stream elects a
// leader.
type electing struct {
	*drain.MemQueue
	down atomic.Bool
}

func (q *electing) wait(ctx context.Context, op string) error {
	if !q.down.Load() {
		return nil
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("%s: %w: %w", op, queue.ErrUnavailable, ctx.Err())
	case <-time.After(2 * time.Second):
		return fmt.Errorf("%s: %w: %w", op, queue.ErrUnavailable, context.DeadlineExceeded)
	}
}

func (q *electing) Get(ctx context.Context, token string, seq uint64) (*queue.Msg, error) {
	if err := q.wait(ctx, "get"); err != nil {
		return nil, err
	}
	return q.MemQueue.Get(ctx, token, seq)
}

func (q *electing) LastSeq(ctx context.Context) (uint64, error) {
	if err := q.wait(ctx, "last sequence"); err != nil {
		return 0, err
	}
	return q.MemQueue.LastSeq(ctx)
}

func (q *electing) Remove(ctx context.Context, seq uint64) error {
	if err := q.wait(ctx, "remove"); err != nil {
		return err
	}
	return q.MemQueue.Remove(ctx, seq)
}

// When the queue stops answering for a while (an election) and answers
// again, deliveries resume within a probe of its return: calls sent while
// it was down are not waited out, nor keys left to their retry pause.
func TestResumesWhenQueueAnswersAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mq, err := drain.NewMemQueue("p", 1000, drain.MemQueueConfig{})
		if err != nil {
			t.Fatal(err)
		}
		q := &electing{MemQueue: mq}
		sink := newRecorder()
		d := drain.New(q, sink, drain.Pace{Interval: 50 * time.Millisecond}, drain.Config{})
		t.Cleanup(d.Stop)
		for k := range 5 {
			for i := range 200 {
				if _, err := mq.Admit(t.Context(), queue.Job{ID: fmt.Sprintf("k%d-%d", k, i), Key: fmt.Sprint("k", k)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		d.Start(t.Context())
		elapse(time.Second)
		q.down.Store(true)
		elapse(5 * time.Second)
		synctest.Wait()
		before := len(sink.deliveries())
		q.down.Store(false)
		back := time.Now()
		elapse(3 * time.Second)
		synctest.Wait()
		var resumed time.Duration = -1
		for _, got := range sink.deliveries()[before:] {
			if resumed < 0 {
				resumed = got.at.Sub(back)
			}
		}
		if resumed < 0 || resumed > 300*time.Millisecond {
			t.Errorf("deliveries resumed %v after the queue answered again, want within 300ms (one probe)", resumed)
		}
		if n := len(sink.deliveries()) - before; n < 5*50 {
			t.Errorf("%d deliveries in the 3 s after the queue came back, want about %d (5 keys at 20/s)", n, 5*60)
		}
	})
}
