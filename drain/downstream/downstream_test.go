package downstream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
func (c *clock) NewTimer(time.Duration) drain.Timer { panic("no timers on a virtual clock") }

func deliver(t *testing.T, s *Downstream) (time.Duration, error) {
	t.Helper()
	d := &drain.Delivery{Policy: "p", Token: "k", Msg: &queue.Msg{Token: "k"}}
	err := s.Deliver(context.Background(), d)
	return d.Took, err
}

func TestNewRejectsBadConfig(t *testing.T) {
	c := &clock{}
	for _, cfg := range []Config{{}, {Capacity: -1}, {Capacity: 1, Phases: []Phase{{After: time.Second}}}} {
		if _, err := New(c, cfg); err == nil {
			t.Errorf("New(%+v) = nil error, want one", cfg)
		}
	}
}

// Under its capacity the downstream answers in its base latency; over it,
// the wait grows by the excess, until answers come after the timeout; a
// later phase changes the capacity.
func TestQueueAndTimeouts(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := New(c, Config{Capacity: 10, Latency: 20 * time.Millisecond, Timeout: 500 * time.Millisecond,
		Phases: []Phase{{After: 10 * time.Second, Capacity: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 { // 5/s: no wait
		if took, err := deliver(t, s); took != 20*time.Millisecond || err != nil {
			t.Fatalf("delivery %d at 5/s: %v, %v; want 20ms, nil", i, took, err)
		}
		c.add(200 * time.Millisecond)
	}
	var last time.Duration
	for i := range 6 { // 20/s: each waits 50 ms more than the one before
		took, err := deliver(t, s)
		if err != nil || i > 0 && took-last != 50*time.Millisecond {
			t.Fatalf("delivery %d at 20/s: %v, %v; want 50 ms more than %v", i, took, err, last)
		}
		last = took
		c.add(50 * time.Millisecond)
	}
	var took time.Duration
	for err == nil {
		took, err = deliver(t, s)
		c.add(50 * time.Millisecond)
	}
	if took != 500*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, drain.ErrDelivery) {
		t.Errorf("past the timeout: %v, %v; want the timeout, a DeadlineExceeded delivery error", took, err)
	}
	if st := s.Stats(); st.TimedOut != 1 || st.Delivered == 0 {
		t.Errorf("Stats() = %+v, want one timeout", st)
	}
	if got := s.Capacity(c.Now().Add(10 * time.Second)); got != 100 {
		t.Errorf("Capacity after the phase = %v, want 100", got)
	}
}

// A bounded queue refuses what would wait longer, with Retry-After.
func TestQueueLimitRefuses(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := New(c, Config{Capacity: 1, Timeout: 5 * time.Second, QueueLimit: 1500 * time.Millisecond, RetryAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // waits 0, 1 s, 2 s: the third is refused
		_, err := deliver(t, s)
		var pause *drain.RetryAfterError
		if i < 2 && err != nil || i == 2 && (!errors.As(err, &pause) || pause.After != 2*time.Second) {
			t.Errorf("delivery %d: %v; want the third refused with Retry-After 2s", i, err)
		}
	}
	if st := s.Stats(); st.Refused != 1 || st.Delivered != 2 {
		t.Errorf("Stats() = %+v, want 2 delivered, 1 refused", st)
	}
}
