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

// remove drops the wait of done, if it is still registered; the lock
// guarding w must be held.
func (w *seenWaiters) remove(done chan struct{}) {
	for i, x := range w.waiting {
		if x.done == done {
			last := len(w.waiting) - 1
			w.waiting[i] = w.waiting[last]
			w.waiting[last] = seenWaiter{}
			w.waiting = w.waiting[:last]
			return
		}
	}
}

// awaitSeen waits, under mu, until seen() reports seq or ctx ends, and
// reports which: seen reads the highest sequence reported, with mu held.
// A wait that ends unseen is dropped: a sequence the watch never reports
// (a job removed before it read it, the stream's last when the stream
// idles) would otherwise keep it for good.
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
		mu.Lock()
		w.remove(done)
		mu.Unlock()
		return false
	}
}
