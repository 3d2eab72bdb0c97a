package drain

import "time"

// What the schedule's answers (eta_ms, Retry-After) expect of receipts not
// in yet: a key not timed answers as the policy's keys did, and a delivery
// being handed over is answered in that time.

// plannedInterval is keyInterval for the schedule's answers (eta_ms,
// Retry-After): a key whose receipts were not timed yet is expected to
// answer as the policy's keys did (their average receipt latency), so a
// new key's first answers count a consumer slower than its slots. d.mu
// must be held.
func (d *Drainer) plannedInterval(k *keyState) time.Duration {
	return max(d.interval(k), d.expectedLatency(k)/time.Duration(d.pace.Concurrency.perKey()))
}

// expectedLatency is how long a delivery of k is expected to await its
// receipt: k's average receipt latency, or before k has one the policy's
// (0: none measured). d.mu must be held.
func (d *Drainer) expectedLatency(k *keyState) time.Duration {
	if k.flight.latency > 0 {
		return k.flight.latency
	}
	return d.latency
}

// nextAfterFlight returns when k's next attempt may start, one delivery
// at a time, while one of its jobs is being handed over: once that one is
// answered, as expected (expectedLatency after it started), and not
// before the slot after its own; the zero time otherwise. It bounds the
// starts the schedule answers with, not when the key's place in its queue
// frees (that is the receipt, KeyStatus.RoomIn). d.mu must be held.
func (d *Drainer) nextAfterFlight(k *keyState) time.Time {
	if d.pace.Concurrency.flies() || !k.delivering() {
		return time.Time{}
	}
	s := k.step
	return maxTime(s.scheduled.Add(d.interval(k)), s.chosen.Add(d.expectedLatency(k)))
}
