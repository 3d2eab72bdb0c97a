package drain

import (
	"context"
	"sync"
)

// seenMark is the highest sequence the watch reported, and the goroutines
// waiting for it to reach theirs (AwaitSeen): each is woken once the
// sequence it waits for is seen, not at every report. (A channel closed at
// every report woke every producer's answer waiting, tens of thousands of
// times a second under load, to find most still not seen.) The lock of its
// owner guards it.
type seenMark struct {
	seq     uint64
	waiting []seenWaiter
}

type seenWaiter struct {
	seq  uint64
	done chan struct{}
}

// advance raises the mark to seq, when higher, and wakes the waits for
// sequences up to it.
func (m *seenMark) advance(seq uint64) {
	if seq <= m.seq {
		return
	}
	m.seq = seq
	if len(m.waiting) == 0 {
		return
	}
	kept := m.waiting[:0]
	for _, x := range m.waiting {
		if x.seq <= seq {
			close(x.done)
		} else {
			kept = append(kept, x)
		}
	}
	clear(m.waiting[len(kept):])
	m.waiting = kept
}

// remove drops the wait of done, if it is still registered.
func (m *seenMark) remove(done chan struct{}) {
	for i, x := range m.waiting {
		if x.done == done {
			last := len(m.waiting) - 1
			m.waiting[i] = m.waiting[last]
			m.waiting[last] = seenWaiter{}
			m.waiting = m.waiting[:last]
			return
		}
	}
}

// await waits until the mark reaches seq or ctx ends, and reports which;
// mu is the lock guarding m. A wait that ends unseen is dropped: a
// sequence the watch never reports (a job removed before it read it, the
// stream's last sequence when the stream idles) would otherwise keep it
// for good.
func (m *seenMark) await(ctx context.Context, mu *sync.Mutex, seq uint64) bool {
	mu.Lock()
	if m.seq >= seq {
		mu.Unlock()
		return true
	}
	done := make(chan struct{})
	m.waiting = append(m.waiting, seenWaiter{seq, done})
	mu.Unlock()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		mu.Lock()
		m.remove(done)
		mu.Unlock()
		return false
	}
}
