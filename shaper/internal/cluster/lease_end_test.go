package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
)

// endingClock, once armed, ends a lease's holding (cancel) the second
// time it is read: right after the first call on the entry came back, so
// that HoldLease finds its context ended with the next call (a look at
// the entry another shaper holds) in flight; and its timers have always
// fired.
type endingClock struct {
	mu     sync.Mutex
	reads  int
	cancel context.CancelFunc
}

func (c *endingClock) arm(cancel context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads, c.cancel = 0, cancel
}

func (c *endingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reads++; c.reads == 2 && c.cancel != nil {
		c.cancel()
	}
	return time.Now()
}

func (c *endingClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return ch
}

func (c *endingClock) read() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// A lease whose holding ends with a call in flight is released, never
// ticked again: with both the end and a timer ready, HoldLease's select
// could pick the timer, and the lease machine's tick panicked ("lease
// tick with a call in flight"; a shaper died of it in
// TestPartitionedAnswers as partitions were shared out).
func TestHoldLeaseEndsWithACallInFlight(t *testing.T) {
	js := jetStreamOf(t, testenv.NATS(t).ClientURL())
	bg := context.Background()
	clock := &endingClock{}
	c, err := cluster.Open(bg, js, cluster.Config{Instance: "a", LeaseTTL: 3 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(bg, "SHAPER_LEASES")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(bg, "p", []byte("another shaper")); err != nil {
		t.Fatal(err)
	}
	for range 32 { // the select picks at random: each run panicked with even odds
		ctx, cancel := context.WithCancel(bg)
		clock.arm(cancel)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.HoldLease(ctx, "p", func(bool, time.Time) {}, nil)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("HoldLease still running 10 s after its context ended")
		}
		if n := clock.read(); n < 2 {
			t.Fatalf("the clock was read %d times: the holding never ended as the test means", n)
		}
	}
}
