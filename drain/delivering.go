package drain

import "time"

// Delivering reports whether the job at seq of the key with token token is
// being delivered: handed to the sink, its receipt not yet back. since is
// when the drainer took it for delivery (its attempt starts about then),
// attempt its attempt (1 for the first; 0 when not known: a key whose
// deliveries fly apart, Concurrency.Key above 1).
func (d *Drainer) Delivering(token string, seq uint64) (since time.Time, attempt int, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.keys[token]
	if k == nil {
		return time.Time{}, 0, false
	}
	if s := k.step; s != nil && s.deliver != nil && s.deliver.Seq == seq && !s.chosen.IsZero() {
		return s.chosen, max(s.deliver.Attempt, 1), true
	}
	for _, a := range k.flight.air() {
		if a.seq == seq {
			return a.at, 0, true
		}
	}
	return time.Time{}, 0, false
}

// Delivering is Drainer.Delivering, from the key's partition's drainer.
func (g *Group) Delivering(token string, seq uint64) (since time.Time, attempt int, ok bool) {
	return g.For(token).Delivering(token, seq)
}
