package drain_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// A key new to a policy whose consumer answers more slowly than its slots
// is promised starts spaced by the receipt time the policy measured, not
// by its slots: its first jobs' answers were too early by the difference
// until the key's own receipts were timed (500 ms receipts at 25/s: the
// third job starts after about 1 s, not 80 ms).
func TestStartInNewKeyCountsPolicyReceipts(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			latency := 500 * time.Millisecond
			r := newMemRig(t, 100, drain.Pace{Interval: 40 * time.Millisecond}, drain.Config{})
			l := newFlightLog(r, latency)
			r.admit("a", 8)
			r.d.Start(t.Context())
			elapse(2*time.Second + 50*time.Millisecond) // a's receipts timed
			r.admit("b", 4)
			token, err := queue.EncodeKey("b")
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			const n = 3
			eta := r.d.StartIn(token, n, now)
			r.sink.wait(t, 12, time.Minute)
			actual := l.of("b")[n-1].at.Sub(now)
			t.Logf("StartIn(%d) = %v; the job started after %v", n, eta, actual)
			if diff := (eta - actual).Abs(); diff > actual*15/100 {
				t.Errorf("StartIn(%d) of a new key = %v, the job started after %v, want within 15%%", n, eta, actual)
			}
		})
	})
}

// A key's next job waits for the receipt of the one being handed over:
// asked while a delivery is in flight, StartIn counts the receipt time
// measured (it said 0 until the receipt came: with 500 ms receipts at
// 25/s, a job asked about 100 ms into a delivery started 400 ms later).
func TestStartInCountsTheDeliveryInFlight(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			r := newMemRig(t, 100, drain.Pace{Interval: 40 * time.Millisecond}, drain.Config{})
			l := newFlightLog(r, 500*time.Millisecond)
			r.admit("a", 4)
			r.d.Start(t.Context())
			token, err := queue.EncodeKey("a")
			if err != nil {
				t.Fatal(err)
			}
			elapse(600 * time.Millisecond) // the first receipt timed; the second delivery 100 ms in flight
			now := time.Now()
			eta := r.d.StartIn(token, 1, now)
			r.sink.wait(t, 4, time.Minute)
			starts := l.of("a")
			if len(starts) != 4 {
				t.Fatalf("%d starts, want 4", len(starts))
			}
			actual := starts[2].at.Sub(now)
			t.Logf("StartIn(1) = %v; the job started after %v", eta, actual)
			if diff := (eta - actual).Abs(); diff > 40*time.Millisecond {
				t.Errorf("StartIn(1) during a delivery = %v, the job started after %v, want within a slot (40ms)", eta, actual)
			}
		})
	})
}
