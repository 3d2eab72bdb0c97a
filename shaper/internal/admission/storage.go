package admission

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// StorageHold is how long a refusal for want of storage keeps a Storage
// full when no job is stored after it: a shaper taken out of service for
// it (not ready) gets no jobs to learn from, so it is ready again this
// long after the last refusal, and the next job tells.
const StorageHold = 10 * time.Second

// Storage is what the queue stores' answers to the jobs of a shaper's
// Gates say of JetStream's room: full from a refusal for want of storage
// (queue.ErrStorageFull) until a job is stored, or StorageHold after the
// last such refusal. It is the answer /readyz gives; the Gates share one
// (Config.Storage). The zero value has room; it is safe for concurrent
// use.
type Storage struct {
	refused atomic.Bool // since is set: a stored job takes the lock only then
	mu      sync.Mutex
	since   time.Time // the first refusal of this spell; zero: room
	last    time.Time // the last refusal
	refusal error
}

// observe notes a store's answer err to a job at now: stored (nil), or
// refused for want of storage; any other answer says nothing of room.
func (s *Storage) observe(err error, now time.Time) {
	if s == nil {
		return
	}
	full := errors.Is(err, queue.ErrStorageFull)
	if err != nil && !full || !full && !s.refused.Load() {
		return // not about room, or a job stored with room known
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !full {
		s.since, s.refusal = time.Time{}, nil
		s.refused.Store(false)
		return
	}
	if s.since.IsZero() || now.Sub(s.last) >= StorageHold {
		s.since = now
	}
	s.last, s.refusal = now, err
	s.refused.Store(true)
}

// Full reports whether JetStream was out of storage at now, by the stores'
// last answers: since when it refuses jobs, and the last refusal.
func (s *Storage) Full(now time.Time) (since time.Time, refusal error, full bool) {
	if s == nil {
		return time.Time{}, nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() || now.Sub(s.last) >= StorageHold {
		return time.Time{}, nil, false
	}
	return s.since, s.refusal, true
}
