// Package logevery thins out a log line that would repeat many times a
// second (a dead Redis, a JetStream electing a leader), keeping count of
// the lines left out.
package logevery

import (
	"sync"
	"time"
)

// Limiter lets one line through per period. Its zero value is ready; it
// is safe for concurrent use.
type Limiter struct {
	mu    sync.Mutex
	last  time.Time
	quiet int // lines left out since the last one let through
}

// Allow reports whether a line at now is logged, at most one per every,
// and how many were left out since the last one that was.
func (l *Limiter) Allow(now time.Time, every time.Duration) (ok bool, left int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < every {
		l.quiet++
		return false, 0
	}
	left = l.quiet
	l.last, l.quiet = now, 0
	return true, left
}
