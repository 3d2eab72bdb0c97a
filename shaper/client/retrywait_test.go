package client

import (
	"testing"
	"time"
)

// The first refusal's Retry-After is honoured exactly; each further one
// adds a spread that doubles from 10 ms up to a second, drawn at random.
func TestRetryWait(t *testing.T) {
	lowest := func(int64) int64 { return 0 }
	highest := func(n int64) int64 { return n - 1 }
	for _, tc := range []struct {
		attempts int
		max      time.Duration
	}{{1, 0}, {2, 10 * time.Millisecond}, {3, 20 * time.Millisecond}, {5, 80 * time.Millisecond}, {9, time.Second}, {60, time.Second}} {
		const ra = 50 * time.Millisecond
		if got := retryWait(ra, tc.attempts, lowest); got != ra {
			t.Errorf("refusal %d, the lowest draw: wait %v, want the Retry-After %v", tc.attempts, got, ra)
		}
		if got := retryWait(ra, tc.attempts, highest); got != ra+tc.max {
			t.Errorf("refusal %d, the highest draw: wait %v, want %v", tc.attempts, got, ra+tc.max)
		}
	}
	if got := retryWait(0, 1, lowest); got != time.Millisecond {
		t.Errorf("a Retry-After of 0: wait %v, want 1 ms", got)
	}
}
