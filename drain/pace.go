package drain

import "time"

// Defaults of a zero Retry.
const (
	DefaultRetryBackoff    = time.Second
	DefaultRetryMaxBackoff = time.Minute
)

// Pace is how a Drainer paces deliveries and retries failed ones. It is a
// plain value. The zero Pace delivers every job as soon as it can, never
// gives up on a failing job, and retries it after the default backoff.
type Pace struct {
	// Interval is the time between two deliveries of one key: the inverse
	// of the key's outflow rate. 0 means no pacing.
	Interval time.Duration
	// Total is the time between two deliveries over all keys: the inverse
	// of a total cap on the outflow. 0 means no cap.
	Total time.Duration
	// Retry says how failed deliveries are retried.
	Retry Retry
	// Adapt, when on, makes Interval (AdaptKey) or Total (AdaptPolicy) a
	// ceiling, and paces at a rate adapted to what deliveries tell (see
	// adaptive.go and package adapt). The zero Adapt is off.
	Adapt Adapt
	// Concurrency bounds the deliveries awaiting their receipt at once,
	// per key and over the keys. The zero value: one per key at a time.
	Concurrency Concurrency
}

// Retry bounds how often and how long a failed delivery is retried. The
// zero Retry retries for ever, after DefaultRetryBackoff doubling up to
// DefaultRetryMaxBackoff.
type Retry struct {
	// Attempts is how many failed attempts of a job make the Drainer give
	// up on it (dead-letter it, with Config.DeadLetter set). 0 means never.
	Attempts int
	// Backoff is the pause after the first failed attempt; after each
	// further one the pause is drawn between it and a ceiling that doubles
	// (jitter above Backoff, not below). 0 means DefaultRetryBackoff.
	Backoff time.Duration
	// MaxBackoff caps the pause. Below Backoff it means the larger of
	// Backoff and DefaultRetryMaxBackoff.
	MaxBackoff time.Duration
	// Deadline is how long after its EnqueuedAt a job may still be retried
	// before it is dead-lettered. 0 means no deadline.
	Deadline time.Duration
	// Budget is the share of a key's slots, above 0 and at most 1, that
	// retries of failed jobs may take while fresh jobs of the key wait: a
	// failed job steps aside and fresh jobs go on (see the package docs).
	// 0 means no budget: a failed job blocks its key, strictly in order,
	// until it is delivered or dead-lettered. Above 1 means 1.
	Budget float64
}

// bounds returns the backoff's first pause and its ceiling, defaults
// applied.
func (r Retry) bounds() (base, ceiling time.Duration) {
	base, ceiling = r.Backoff, r.MaxBackoff
	if base <= 0 {
		base = DefaultRetryBackoff
	}
	if ceiling < base {
		ceiling = max(base, DefaultRetryMaxBackoff)
	}
	return base, ceiling
}

// wait returns the pause before the next attempt after failures failed
// ones, with jitter j in [0,1).
func (r Retry) wait(failures int, j float64) time.Duration {
	base, ceiling := r.bounds()
	return backoff(failures, base, ceiling, j)
}

// stepsAside reports whether a failed job may step aside for the key's
// fresh jobs: whether there is a retry budget.
func (r Retry) stepsAside() bool { return r.Budget > 0 }

// earning returns, for a budget below 1, the retries one fresh attempt
// earns a key, and the most credit a key keeps: with a share b of the slots
// for retries, R retries may come with F fresh attempts while
// R ≤ F·b/(1−b). The ceiling is at least initialCredit, the credit a key
// starts with.
func (r Retry) earning() (earn, ceiling float64) {
	earn = r.Budget / (1 - r.Budget)
	return earn, max(earn, initialCredit)
}

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
	behind := a.Sub(s) / interval // whole intervals behind
	return s.Add((behind + 1) * interval)
}

// slotHold is how long a delivered job keeps its queue slot: the rest of its
// outflow slot, at most maxHold. While a key drains under backlog a burst of
// submissions therefore sees exactly the queue size free, as a leaky bucket
// of that depth would; and a crash redelivers at most one job per key.
//
// A hold that would end at the key's next slot (interval at most maxHold)
// of 4·freeLead or more ends freeLead early instead: the slot is freed in
// a step of its own just before the next slot, so that the delivery in that
// slot does not wait for the removal (a JetStream request whose time varies
// with the server's load) and starts on time.
func slotHold(interval, maxHold time.Duration) time.Duration {
	switch {
	case interval > maxHold:
		return maxHold
	case interval >= 4*freeLead:
		return interval - freeLead
	}
	return interval
}

// freeLead is how long before its slot ends a delivered job's slot is
// freed (slotHold).
const freeLead = 10 * time.Millisecond

// holdEnd returns when a job delivered at started frees its queue slot,
// next being its key's next slot: after hold (slotHold), but with slots
// 4·freeLead or more apart no later than freeLead before next. A delivery
// that started late thus frees its slot on the key's grid, in a step of
// its own, as one on time does. Counted from the start alone, the removal
// after a delivery more than freeLead late fell into the next slot, whose
// delivery waited for it (and was late in turn), and the key's steps moved
// with its lateness: under a burst of slots (many keys due within a few
// milliseconds) the late keys' steps landed elsewhere in the next burst
// each round, and their deliveries with them.
func holdEnd(started, next time.Time, hold, interval time.Duration) time.Time {
	end := started.Add(hold)
	if lead := next.Add(-freeLead); interval >= 4*freeLead && end.After(lead) {
		return lead
	}
	return end
}

// backoff returns the pause before attempt n+1 after n failures: a ceiling
// of base doubling per failure, capped at maxWait, and jitter between base
// and that ceiling drawn from j (a number in [0,1)), so that retries of
// many jobs spread out instead of storming together. After the first
// failure the ceiling is base: no jitter.
func backoff(n int, base, maxWait time.Duration, j float64) time.Duration {
	d := base
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	d = max(min(d, maxWait), base)
	return base + time.Duration(float64(d-base)*j)
}
