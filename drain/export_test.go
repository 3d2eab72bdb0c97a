package drain

import "context"

// Recount counts, looking at every key, the figures Stats keeps as they
// change: the keys with jobs and the jobs stepped aside.
func (d *Drainer) Recount() (keys, aside int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range d.keys {
		if k.depth > 0 {
			keys++
		}
		aside += len(k.aside)
	}
	return keys, aside
}

// ResyncNow reads a passive Drainer's depths from the queue, as a started
// one does every resyncPeriod.
func (d *Drainer) ResyncNow(ctx context.Context) { d.resync(ctx) }
