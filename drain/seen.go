package drain

import (
	"context"
	"sync"
)

// seenWaiters are the goroutines waiting for the watch to report a
// sequence (AwaitSeen): each is woken once the sequence it waits for is
// seen, not at every report. (A channel closed at every report woke every
// producer's answer waiting, tens of thousands of times a second under
// load, to find most still not seen.)
type seenWaiters struct {
	waiting []seenWaiter
}

type seenWaiter struct {
	seq  uint64
	done chan struct{}
}

// add registers a wait for seq; the lock guarding w must be held.
func (w *seenWaiters) add(seq uint64) chan struct{} {
	done := make(chan struct{})
	w.waiting = append(w.waiting, seenWaiter{seq, done})
	return done
}

// seen wakes the waits for sequences up to seq; the lock guarding w must
// be held.
func (w *seenWaiters) seen(seq uint64) {
	if len(w.waiting) == 0 {
		return
	}
	kept := w.waiting[:0]
	for _, x := range w.waiting {
		if x.seq <= seq {
			close(x.done)
		} else {
			kept = append(kept, x)
		}
	}
	clear(w.waiting[len(kept):])
	w.waiting = kept
}

// awaitSeen waits, under mu, until seen() reports seq or ctx ends, and
// reports which: seen reads the highest sequence reported, with mu held.
func awaitSeen(ctx context.Context, mu *sync.Mutex, w *seenWaiters, seen func() uint64, seq uint64) bool {
	mu.Lock()
	if seen() >= seq {
		mu.Unlock()
		return true
	}
	done := w.add(seq)
	mu.Unlock()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false // the wait stays registered until seq is seen: closed then, unread
	}
}
