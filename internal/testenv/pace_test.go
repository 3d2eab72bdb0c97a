package testenv

import (
	"testing"
	"time"
)

func TestPaced(t *testing.T) {
	t0 := time.Now()
	grid := func(offsets ...time.Duration) []time.Time {
		out := make([]time.Time, len(offsets))
		for i, o := range offsets {
			out[i] = t0.Add(time.Duration(i)*50*time.Millisecond + o)
		}
		return out
	}
	ms := time.Millisecond
	for _, c := range []struct {
		name     string
		arrivals []time.Time
		bad      int
	}{
		{"on the grid", grid(0, 0, 0, 0), 0},
		{"first stamped late", grid(8*ms, 0, 0, 0), 0},
		{"one far behind", grid(0, 0, 400*ms, 450*ms), 2},
		{"too fast", []time.Time{t0, t0.Add(10 * ms), t0.Add(20 * ms), t0.Add(30 * ms)}, 1},
		// The failure CI-like load produced: the first of 10 stamped 17 ms
		// late, so the run looked 433 ms long instead of 450 ms.
		{"first of ten stamped 17 ms late", grid(17*ms, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0},
		{"one slot too fast in the middle", grid(0, 0, 0, 0, -50*ms, -50*ms, -50*ms, -50*ms, -50*ms, -50*ms), 1},
		{"one stamped 49 ms late", grid(0, 49*ms, 0, 0), 0},
		{"two at one instant", grid(0, 0, -50*ms, 0), 1},
	} {
		if bad := Paced(c.arrivals, 50*ms, 300*ms); len(bad) != c.bad {
			t.Errorf("%s: Paced = %q, want %d complaints", c.name, bad, c.bad)
		}
	}
}
