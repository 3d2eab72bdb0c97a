package testenv

import (
	"fmt"
	"time"
)

// Paced checks that arrivals (in delivery order) keep to a grid of slots
// one slot apart: none more than late behind its slot, and no window of
// length T holding more than ceil(T/slot)+1 of them (the drain's promise
// in docs/architecture.md). The grid is anchored at the arrival earliest relative to
// its slot, not at the first arrival: on a busy machine any one arrival,
// the first included, can be stamped some milliseconds late, which would
// make every later one look early. The window bound leaves room for the
// same stamping delay (up to one slot) without letting a drain that runs
// fast pass. It returns what is wrong, one line each.
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
	// The first window that holds too many, if any.
	for i := range arrivals {
		for j := i + 1; j < len(arrivals); j++ {
			window := arrivals[j].Sub(arrivals[i])
			allowed := int((window+slot-1)/slot) + 1
			if n := j - i + 1; window >= 0 && n > allowed {
				return append(bad, fmt.Sprintf("deliveries %d to %d (%d) within %v, more than ceil(T/%v)+1 = %d", i, j, n, window, slot, allowed))
			}
		}
	}
	return bad
}
