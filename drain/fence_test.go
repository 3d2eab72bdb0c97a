package drain_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
)

// TestHoldUntil: a started Drainer delivers only before the bound
// HoldUntil sets (the end of its drain lease); past it nothing starts, no
// slot is lost, and a renewal (a later bound) resumes the key on its grid.
func TestHoldUntil(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			r := newMemRig(t, 100, drain.Pace{Interval: 100 * time.Millisecond}, drain.Config{})
			t0 := time.Now()
			r.d.HoldUntil(t0.Add(time.Second))
			ids := r.admit("a", 30)
			r.d.Start(t.Context())
			elapse(3 * time.Second)
			synctest.Wait()
			got := r.sink.deliveries()
			if len(got) != 10 {
				t.Fatalf("%d deliveries with the lease ending after 1 s at 10/s, want 10", len(got))
			}
			for _, d := range got {
				if !d.at.Before(t0.Add(time.Second)) {
					t.Errorf("delivery of %s at +%v, past the lease's end at +1s", d.id, d.at.Sub(t0))
				}
			}
			renewed := time.Now()
			r.d.HoldUntil(renewed.Add(time.Hour))
			all := r.sink.wait(t, 30, 10*time.Second)
			checkFIFO(t, "a", all, ids)
			if first := all[10].at; first.Sub(renewed) > 100*time.Millisecond {
				t.Errorf("first delivery %v after the renewal, want within one interval", first.Sub(renewed))
			}
			if n := maxInWindow(all[10:], time.Second); n > 11 {
				t.Errorf("%d deliveries in one second after the renewal, want at most 11", n)
			}
			r.d.HoldUntil(time.Time{}) // no bound
			r.admit("a", 1)
			r.sink.wait(t, 31, time.Second)
		})
	})
}

// TestHoldUntilFrozen: a step scheduled before the lease's end but run
// after it — the process frozen in between — hands nothing over; the job
// goes once the lease is renewed. A driven Drainer shows it: Advance
// schedules at the time it is given, the step reads the clock.
func TestHoldUntilFrozen(t *testing.T) {
	r := newReplay(t, 10, drain.Pace{Interval: time.Second}, drain.Config{})
	ctx := context.Background()
	t0 := r.clock.Now()
	r.d.HoldUntil(t0.Add(1500 * time.Millisecond))
	r.admit(t, "a", "a-0")
	r.admit(t, "a", "a-1")
	r.d.Advance(ctx, t0)                 // a-0 now, a-1 read ahead for its slot at 1 s
	r.clock.set(t0.Add(5 * time.Second)) // frozen from before a-1's step until past the lease's end
	r.d.Advance(ctx, t0.Add(time.Second))
	if want := []string{"0s a-0"}; !slices.Equal(r.log, want) {
		t.Fatalf("deliveries %q with a step run past the lease's end, want %q", r.log, want)
	}
	if next, ok := r.d.Advance(ctx, r.clock.Now()); ok {
		t.Fatalf("a Drainer past its lease's end is due again at %v, want not before a renewal", next.Sub(t0))
	}
	r.d.HoldUntil(r.clock.Now().Add(time.Minute))
	r.d.Advance(ctx, r.clock.Now())
	if want := []string{"0s a-0", "5s a-1"}; !slices.Equal(r.log, want) {
		t.Fatalf("after the renewal: %q, want %q", r.log, want)
	}
}

// TestHoldUntilStepLate: a step handed to a worker before the lease's end
// but run after it (the worker was busy, or the process frozen in between)
// hands nothing over.
func TestHoldUntilStepLate(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			r := newMemRig(t, 10, drain.Pace{Interval: time.Second}, drain.Config{Workers: 1})
			t0 := time.Now()
			r.d.HoldUntil(t0.Add(1500 * time.Millisecond))
			r.sink.setFail(func(d *drain.Delivery) error {
				if d.Msg.Key == "slow" {
					elapse(2 * time.Second) // the one worker is busy past the lease's end
				}
				return nil
			})
			r.admit("a", 2) // a-0 at once, a-1 at 1 s
			r.d.Start(t.Context())
			elapse(900 * time.Millisecond)
			r.admit("slow", 1) // from 0.9 s to 2.9 s; a-1's step waits for the worker
			elapse(5 * time.Second)
			synctest.Wait()
			for _, d := range r.sink.tries() {
				if d.id == "a-1" {
					t.Errorf("a-1 handed over at +%v, past the lease's end at +1.5s", d.at.Sub(t0))
				}
			}
			r.d.HoldUntil(time.Now().Add(time.Minute))
			r.sink.wait(t, 3, time.Second)
		})
	})
}
