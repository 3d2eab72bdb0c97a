package testenv

import (
	"fmt"
	"time"
)

// Paced checks that arrivals (in delivery order) keep to a grid of slots
// one slot apart: none more than late behind its slot, and the whole run no
// shorter than the slots it spans (less 10 ms). The grid is anchored at the
// arrival earliest relative to its slot, not at the first arrival: on a busy
// machine any one arrival, the first included, can be stamped some
// milliseconds late, which would make every later one look early. It
// returns what is wrong, one line each.
func Paced(arrivals []time.Time, slot, late time.Duration) []string {
	if len(arrivals) == 0 {
		return nil
	}
	grid := arrivals[0]
	for i, at := range arrivals {
		if a := at.Add(-time.Duration(i) * slot); a.Before(grid) {
			grid = a
		}
	}
	var bad []string
	for i, at := range arrivals {
		if d := at.Sub(grid.Add(time.Duration(i) * slot)); d > late {
			bad = append(bad, fmt.Sprintf("delivery %d came %v after its slot (slots %v apart)", i, d, slot))
		}
	}
	n := len(arrivals) - 1
	if span, want := arrivals[n].Sub(arrivals[0]), time.Duration(n)*slot-10*time.Millisecond; span < want {
		bad = append(bad, fmt.Sprintf("%d deliveries within %v, want at least %v at one per %v", n+1, span, want, slot))
	}
	return bad
}
