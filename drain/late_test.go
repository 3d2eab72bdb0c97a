package drain_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
)

// A key whose slot comes 50 ms late (the process stalled) catches up on
// its grid instead of shifting it: the late job goes at once, the next
// one in its own slot, and over the run no slot is lost and no second
// holds more than ⌈rate⌉+1 deliveries.
func TestLateSlotCatchesUp(t *testing.T) {
	const jobs = 40
	r := newReplay(t, jobs, drain.Pace{Interval: 100 * time.Millisecond}, drain.Config{})
	t0 := r.clock.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for i := range jobs {
		r.admit(t, "k", fmt.Sprintf("j%02d", i))
	}
	r.until(at(499 * time.Millisecond))
	r.clock.set(at(550 * time.Millisecond)) // the slot at 500 ms is 50 ms late
	r.until(at(2*time.Second - time.Nanosecond))
	var got []time.Duration
	for _, l := range r.log {
		d, err := time.ParseDuration(strings.Fields(l)[0])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if len(got) < 6 || got[5] != 550*time.Millisecond {
		t.Fatalf("deliveries %q, want the sixth at 550 ms, when the stall ended", r.log)
	}
	if len(got) != 20 {
		t.Errorf("%d deliveries in 2 s at 10/s with one 50 ms stall, want 20 (no slot lost): %q", len(got), r.log)
	}
	for i := 6; i < len(got); i++ {
		if want := time.Duration(i) * 100 * time.Millisecond; got[i] != want {
			t.Errorf("delivery %d at %v, want %v: the grid shifted after the late slot (%q)", i, got[i], want, r.log)
			break
		}
	}
	for i := range got {
		n := 0
		for _, d := range got[i:] {
			if d-got[i] < time.Second {
				n++
			}
		}
		if n > 11 {
			t.Errorf("%d deliveries in the second from %v, want at most 11", n, got[i])
		}
	}
}
