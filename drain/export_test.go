package drain

import (
	"context"
	"fmt"
	"slices"
)

// Recount counts, looking at every key, the figures Stats keeps as they
// change: the keys with jobs and the jobs stepped aside. It also checks
// the index of the keys by depth that Deepest reads, and returns Deepest's
// depths as every key says them.
func (d *Drainer) Recount(n int) (keys, aside int, deepest []int64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	listed := 0
	for l, head := range d.counts.levels {
		var up *keyState
		for k := head; k != nil; up, k = k, k.down {
			if k.up != up || levelOf(k.depth) != l+1 || d.keys[k.token] != k {
				return 0, 0, nil, fmt.Errorf("key %q of depth %d listed at level %d, after %p (its up: %p), held: %v", k.name, k.depth, l+1, up, k.up, d.keys[k.token] == k)
			}
			listed++
		}
	}
	if n := len(d.counts.levels); n > 0 && d.counts.levels[n-1] == nil {
		return 0, 0, nil, fmt.Errorf("the index has %d levels, the top one empty", n)
	}
	for _, k := range d.keys {
		if k.depth > 0 {
			keys++
			deepest = append(deepest, k.depth)
		}
		aside += len(k.aside)
	}
	if listed != keys {
		return 0, 0, nil, fmt.Errorf("%d keys listed by depth, %d have jobs", listed, keys)
	}
	slices.SortFunc(deepest, func(a, b int64) int { return int(b - a) })
	return keys, aside, deepest[:min(n, len(deepest))], nil
}

// ResyncNow reads a passive Drainer's depths from the queue, as a started
// one does every resyncPeriod.
func (d *Drainer) ResyncNow(ctx context.Context) { d.resync(ctx) }

// Pace returns the pace the Drainer runs at.
func (d *Drainer) Pace() Pace {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pace
}
