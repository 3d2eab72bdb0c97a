package drain

import "time"

// nextSlot returns the earliest start of the delivery after one scheduled
// for s that started at a, for slots every interval: s+interval while the
// drain keeps time; when it fell more than a whole interval behind, the
// first slot of the key's own grid (s + k·interval) after a. Keeping the
// grid instead of restarting from a keeps keys that were served late
// together from bunching into the same slots for ever after.
//
// Each delivery thus falls in its own grid cell of one interval, so in a
// window of length T at most ⌈T/interval⌉+1 deliveries start; and under
// backlog the achieved rate is exactly 1/interval because slots advance by
// the schedule, not by when deliveries happen to run.
func nextSlot(s, a time.Time, interval time.Duration) time.Time {
	n := s.Add(interval)
	if !a.After(n) || interval <= 0 {
		return n
	}
	k := a.Sub(s) / interval // whole intervals behind
	return s.Add((k + 1) * interval)
}

// slotHold is how long a delivered job keeps its queue slot: the rest of its
// outflow slot, at most maxHold. While a key drains under backlog a burst of
// submissions therefore sees exactly the queue size free, as a leaky bucket
// of that depth would; and a crash redelivers at most one job per key.
func slotHold(interval, maxHold time.Duration) time.Duration {
	return min(interval, maxHold)
}

// backoff returns the pause before attempt n+1 after n failures: a ceiling
// of base doubling per failure, capped at maxWait, and full jitter between
// base and that ceiling drawn from j (a number in [0,1)), so retries of many
// jobs spread out instead of storming together.
func backoff(n int, base, maxWait time.Duration, j float64) time.Duration {
	d := base
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	d = max(min(d, maxWait), base)
	return base + time.Duration(float64(d-base)*j)
}
