package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// countSink takes every delivery.
type countSink chan string

func (c countSink) Deliver(_ context.Context, d *Delivery) error {
	c <- d.Msg.ID
	return nil
}

// TestReleasedKeyLetsGoOfItsJob checks that a key whose step is over keeps
// no reference to the job it delivered while it waits to free the job's
// slot: at start-up on many keys those removals wait behind the backlog,
// and every delivered job's payload and headers stayed in memory until then.
func TestReleasedKeyLetsGoOfItsJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := NewMemQueue("p", 10, MemQueueConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Admit(context.Background(), queue.Job{ID: "j1", Key: "k", Payload: []byte("payload")}); err != nil {
			t.Fatal(err)
		}
		sink := make(countSink, 1)
		d := New(q, sink, Pace{Interval: time.Second}, Config{Workers: 2})
		t.Cleanup(d.Stop)
		d.Start(t.Context())
		if id := <-sink; id != "j1" {
			t.Fatalf("delivered %q, want j1", id)
		}
		synctest.Wait() // the step is over; the slot is held for a second
		d.mu.Lock()
		defer d.mu.Unlock()
		k := d.keys["k"]
		if k == nil || k.busy || len(k.pend) != 1 {
			t.Fatalf("key k: %+v, want it released, its delivered job's slot held", k)
		}
		if k.step != nil {
			t.Errorf("released key still has a step: %+v", k.step)
		}
		for _, s := range d.steps {
			if s.k != nil || s.deliver != nil || s.delivery.Msg != nil || s.head != nil || s.deadLetter != nil {
				t.Errorf("pooled step still holds a key or jobs: key %v, deliver %v, delivery %v, head %v, dead letter %v",
					s.k, s.deliver, s.delivery.Msg, s.head, s.deadLetter)
			}
		}
	})
}
