package drain

import (
	"slices"
	"time"
)

// afterReady returns when a key ready at at gets its slot under the cap
// when no slot is reserved ahead: after the slots the keys in r.ready take,
// each when it is ready and a cap's interval after the one before.
func (r *rounds) afterReady(at time.Time) time.Time {
	if len(r.ready) == 0 {
		return at
	}
	slices.SortFunc(r.ready, time.Time.Compare)
	last := r.ready[0]
	for _, ready := range r.ready[1:] {
		last = maxTime(ready, last.Add(r.total))
	}
	return maxTime(at, last.Add(r.total))
}
