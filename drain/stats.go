package drain

import (
	"context"
	"time"
)

// Stats is a snapshot of a Drainer's figures.
type Stats struct {
	Keys   int   `json:"keys"`   // keys with jobs queued
	Queued int64 `json:"queued"` // jobs queued over all keys (including those in delivery)
	// QueuedDraining is Queued of the drainers that deliver (active): a
	// passive one's count lags the removals of the shaper that delivers,
	// by up to its resync period, and only this one is exact.
	QueuedDraining int64  `json:"queued_draining"`
	Delivered      uint64 `json:"delivered"` // deliveries accepted by the sink
	Failed         uint64 `json:"failed"`    // delivery attempts that failed
	Dead           uint64 `json:"dead"`      // jobs dead-lettered by this drainer since start
	InFlight       int    `json:"in_flight"` // steps running now, and deliveries awaiting their receipt apart from them
	// Retries counts the attempts that retried a failed job, delivered or
	// failed again (they count in Delivered or Failed too): the slots the
	// retry budget gave. Retries/(Delivered+Failed) is the share of the
	// attempts they took, at most Pace.Retry.Budget while fresh jobs wait.
	Retries uint64 `json:"retries"`
	// RetriesDeferred counts the slots in which a retry was due but a fresh
	// job went, because the key's retry budget was spent.
	RetriesDeferred uint64 `json:"retries_deferred"`
	// SteppedAside is the number of failed jobs waiting now for a retry
	// while the fresh jobs of their key go on.
	SteppedAside int `json:"stepped_aside"`
}

// Stats returns the Drainer's current figures. A delivery or dead letter
// counts from just before its event is reported. It costs the same however
// many keys the Drainer holds: every figure is kept as it changes.
func (d *Drainer) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	var draining int64
	if d.active {
		draining = d.queued
	}
	return Stats{Keys: d.counts.withJobs, Queued: d.queued, QueuedDraining: draining, Delivered: d.delivered.Load(), Failed: d.failures.Load(),
		Dead: d.dead.Load(), InFlight: d.inflight, Retries: d.retries, RetriesDeferred: d.retriesDeferred,
		SteppedAside: d.counts.aside}
}

// KeyStatus is what a Drainer can tell about one key, for the answers to
// producers. When a job would start is StartIn's answer.
type KeyStatus struct {
	Queued  int64 // jobs stored for the key, as far as the drainer has seen
	Waiting int64 // of those, jobs not yet delivered
	// Seen is a sequence up to which the drainer has seen every job of the
	// key stored: the highest of the whole queue its watch reported (which
	// reports every job in order), so also for a key it no longer tracks.
	Seen uint64
	// RoomIn is the time until a slot of the key frees: the end of the hold
	// of a job delivered, or of the key's next attempt (by the schedule:
	// StartIn), assumed to succeed. Slots being freed now (Freeing) are not
	// in it: it is the room after them.
	RoomIn time.Duration
	// Freeing counts the delivered jobs of the key whose slots are due to
	// be freed by now: they are being removed (Queued still counts them).
	Freeing int64
	// FreedAt is when the drainer last counted a slot of the key freed by
	// its own removal (a delivered or dead-lettered job), after the queue
	// had removed it; zero if never. A store that refused a job of the key
	// after FreedAt saw that slot freed.
	FreedAt time.Time
	// Retrying is the number of the key's failed jobs waiting for a retry
	// or their dead letter: stepped aside, or at the head of the key. The
	// key's fresh jobs are Waiting − Retrying.
	Retrying int
}

// AwaitSeen waits until the watch of the queue has reported the job at
// seq (so Key and StartIn count it), and reports whether it has; it gives
// up when ctx ends. A producer's answer about a job just stored can so
// count every job stored before it, of every key.
func (d *Drainer) AwaitSeen(ctx context.Context, seq uint64) bool {
	return d.seen.await(ctx, &d.mu, seq)
}

// Key returns the status of the key with token token at now. For a key the
// Drainer has not seen, Queued is 0 and RoomIn is one outflow interval.
func (d *Drainer) Key(token string, now time.Time) KeyStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.keys[token]
	if k == nil {
		return KeyStatus{RoomIn: d.intervalOf(token), Seen: d.seen.seq}
	}
	return d.status(k, now)
}
