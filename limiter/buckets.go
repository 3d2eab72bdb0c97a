package limiter

import (
	"time"
)

// GCRAState is what GCRA keeps per key: the theoretical arrival time (TAT)
// of the next event if events came exactly at the configured rate. It is
// the leaky bucket used as a meter: the bucket's level is TAT-now, it leaks
// one event per emission interval Period/Count and holds Burst events.
//
// The zero value is a key with no history. A GCRAState is a plain value:
// it is not safe for concurrent use; guard it or give each goroutine its own.
type GCRAState struct {
	// TAT is the theoretical arrival time; a TAT not after now means an empty bucket.
	TAT time.Time
}

// emissionInterval is Period/Count, rounded down to the nanosecond and at
// least 1ns: the time one event takes to leak out of the bucket.
func emissionInterval(l Limit) time.Duration {
	t := l.Period / time.Duration(l.Count)
	if t < 1 {
		t = 1
	}
	return t
}

// Allow decides for one event at now under l, and records it in s when it
// is admitted. It reads no clock: now is the only time it knows.
func (s *GCRAState) Allow(l Limit, now time.Time) Result {
	t := emissionInterval(l)
	capacity := l.capacity()
	tau := t * time.Duration(capacity) // how far TAT may run ahead of now
	tat := s.TAT
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(t)
	ahead := next.Sub(now)
	if ahead > tau {
		return Result{Limit: capacity, RetryAfter: ahead - tau, Reset: tat.Sub(now)}
	}
	s.TAT = next
	return Result{Allowed: true, Limit: capacity, Remaining: int64((tau - ahead) / t), Reset: ahead}
}

// TokenBucketState is what the token bucket keeps per key: the tokens left
// at the instant Last. Tokens are added at Count per Period up to the
// bucket's capacity (Burst, or Count), and each event takes one.
//
// The zero value is a key with no history: a full bucket. A
// TokenBucketState is not safe for concurrent use.
type TokenBucketState struct {
	// Tokens is the number of tokens in the bucket at Last.
	Tokens float64
	// Last is when Tokens was computed; the zero time means a full bucket.
	Last time.Time
}

// refill returns the tokens the bucket holds at now.
func (s *TokenBucketState) refill(l Limit, now time.Time) float64 {
	capacity := float64(l.capacity())
	if s.Last.IsZero() {
		return capacity
	}
	tokens := s.Tokens
	if now.After(s.Last) {
		tokens += float64(now.Sub(s.Last)) * float64(l.Count) / float64(l.Period)
	}
	return min(tokens, capacity)
}

// untilTokens returns the shortest wait after which a bucket holding tokens
// holds at least want, computed with the same arithmetic as refill.
func untilTokens(l Limit, tokens, want float64) time.Duration {
	if tokens >= want {
		return 0
	}
	d := time.Duration((want - tokens) * float64(l.Period) / float64(l.Count))
	for tokens+float64(d)*float64(l.Count)/float64(l.Period) < want {
		d++
	}
	return d
}

// Allow decides for one event at now under l, and takes a token from s
// when it is admitted. It reads no clock.
func (s *TokenBucketState) Allow(l Limit, now time.Time) Result {
	capacity := l.capacity()
	tokens := s.refill(l, now)
	if s.Last.IsZero() || now.After(s.Last) {
		s.Last = now
	}
	r := Result{Limit: capacity}
	if tokens >= 1 {
		tokens--
		r.Allowed = true
	} else {
		r.RetryAfter = untilTokens(l, tokens, 1)
	}
	s.Tokens = tokens
	r.Remaining = int64(tokens)
	r.Reset = untilTokens(l, tokens, float64(capacity))
	return r
}
