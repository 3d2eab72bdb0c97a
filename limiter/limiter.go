package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Algorithm names one of the five rate-limiting algorithms. The names are
// the ones policy files use.
type Algorithm string

// The five algorithms; see the package documentation for their trade-offs.
const (
	GCRA          Algorithm = "gcra"           // leaky bucket as a meter: one timestamp per key
	TokenBucket   Algorithm = "token_bucket"   // tokens refilled at a fixed rate, up to Burst
	FixedWindow   Algorithm = "fixed_window"   // one counter per aligned window
	SlidingLog    Algorithm = "sliding_log"    // the timestamps of the admitted events of the last Period
	SlidingWindow Algorithm = "sliding_window" // two counters, weighted estimate of the last Period
)

// Algorithms lists every algorithm, in the order of the package documentation.
var Algorithms = []Algorithm{GCRA, TokenBucket, FixedWindow, SlidingLog, SlidingWindow}

// Errors callers branch on with errors.Is.
var (
	// ErrUnknownAlgorithm is returned for an algorithm name that is not one of Algorithms.
	ErrUnknownAlgorithm = errors.New("unknown limiter algorithm")
	// ErrInvalidLimit is returned for a Limit with a non-positive Count or
	// Period, or a negative Burst.
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrUnavailable is wrapped by the error a Redis limiter returns when it
	// could not reach Redis in time; the Result it returns with it reflects
	// the configured fail-open or fail-closed choice.
	ErrUnavailable = errors.New("limiter backend unavailable")
)

// Bursts reports whether a takes a Limit.Burst: the two buckets do (GCRA
// and TokenBucket); the windows count whole events per window and do not.
func (a Algorithm) Bursts() bool { return a == GCRA || a == TokenBucket }

// ParseAlgorithm returns the Algorithm named s (case-insensitive, surrounding
// space ignored), or an error wrapping ErrUnknownAlgorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	a := Algorithm(strings.ToLower(strings.TrimSpace(s)))
	for _, known := range Algorithms {
		if a == known {
			return a, nil
		}
	}
	names := make([]string, len(Algorithms))
	for i, known := range Algorithms {
		names[i] = string(known)
	}
	return "", fmt.Errorf("parse algorithm %q: %w (want one of %s)", s, ErrUnknownAlgorithm, strings.Join(names, ", "))
}

// Limit is a rate limit: Count events per Period for each key. The zero
// value is invalid; every constructor checks it with Validate.
type Limit struct {
	// Count is how many events a key may have per Period; it must be positive.
	Count int64
	// Period is the length of the window; it must be positive.
	Period time.Duration
	// Burst is the capacity of the two buckets (GCRA and token bucket): how
	// many events a key that has been idle may have at once. The buckets
	// refill at Count per Period whatever Burst is. 0 means Count. The
	// window algorithms ignore it.
	Burst int64
}

// Validate returns an error wrapping ErrInvalidLimit when l cannot be used.
func (l Limit) Validate() error {
	switch {
	case l.Count <= 0:
		return fmt.Errorf("limit: count %d: %w: must be positive", l.Count, ErrInvalidLimit)
	case l.Period <= 0:
		return fmt.Errorf("limit: period %v: %w: must be positive", l.Period, ErrInvalidLimit)
	case l.Burst < 0:
		return fmt.Errorf("limit: burst %d: %w: must not be negative", l.Burst, ErrInvalidLimit)
	}
	return nil
}

// String formats l as "Count/Period", followed by " burst N" when Burst is set.
func (l Limit) String() string {
	s := fmt.Sprintf("%d/%v", l.Count, l.Period)
	if l.Burst != 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}

// capacity is Burst, or Count when Burst is 0.
func (l Limit) capacity() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Count
}

// quota is the most events alg admits at once from a fresh key: the bucket
// capacity for the buckets, Count for the windows.
func (l Limit) quota(alg Algorithm) int64 {
	if alg.Bursts() {
		return l.capacity()
	}
	return l.Count
}

// Result is one decision, with what rate-limit HTTP headers need.
type Result struct {
	// Allowed reports whether the event is admitted (and was counted).
	Allowed bool
	// Limit is the most events a fresh key may have at once: Count for the
	// window algorithms, the bucket capacity for the buckets.
	Limit int64
	// Remaining is how many more events would be admitted right now.
	Remaining int64
	// RetryAfter is how long until an event would be admitted again; 0 when Allowed.
	RetryAfter time.Duration
	// Reset is how long until the key is back to its full quota if no more
	// events arrive (it then holds no state worth keeping).
	Reset time.Duration
}

// Limiter decides whether an event of a key is admitted. Implementations in
// this package are safe for concurrent use.
type Limiter interface {
	// Allow decides for one event of key, counting it when it is admitted.
	Allow(ctx context.Context, key string) (Result, error)
}

var (
	_ Limiter = (*Memory)(nil)
	_ Limiter = (*Redis)(nil)
)
