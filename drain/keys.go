package drain

import (
	"container/heap"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// keyState is everything a Drainer knows about one key. It is guarded by
// Drainer.mu; while busy, a worker owns the I/O for the key and nobody else
// touches its queue, which is what keeps each key FIFO.
type keyState struct {
	token string
	name  string
	idx   int       // position in the heap, -1 when not in it
	at    time.Time // when the scheduler next looks at the key

	busy bool // a worker is running a step for the key
	wake bool // a job was stored while busy: read the head again if the queue looked empty

	held     *queue.Msg // the head job, read ahead of its slot
	due      time.Time  // when held may start (its slot)
	reserved bool       // due is a slot already reserved under the policy's total cap
	fails    int        // failed attempts of held that count
	history  []string   // what happened to held, for the dead letter
	bury     string     // dead-letter held with this reason
	next     time.Time  // earliest start of the key's next delivery (pacing)
	from     uint64     // read the head from this sequence on
	seqs     []uint64   // sequences Watch reported, not yet read (ascending): every job of the key from `from` on

	pend      []uint64  // delivered jobs whose slots are not yet freed
	pendingAt time.Time // when to free them if no delivery does it first

	fetch   bool      // the head must be read
	fetchAt time.Time // not before this

	notified uint64              // highest sequence Watch reported
	early    map[uint64]struct{} // removed before Watch reported them
	depth    int64               // jobs stored for the key, as far as the drainer saw
}

// nextEvent returns when the key next needs the scheduler, and false when it
// needs nothing (idle).
func (k *keyState) nextEvent() (time.Time, bool) {
	var at time.Time
	ok := false
	consider := func(t time.Time) {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	if k.held != nil {
		consider(k.due)
	}
	if len(k.pend) > 0 {
		consider(k.pendingAt)
	}
	if k.fetch {
		consider(k.fetchAt)
	}
	return at, ok
}

// keyHeap orders keys by the time they next need the scheduler.
type keyHeap []*keyState

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h keyHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *keyHeap) Push(x any) {
	k := x.(*keyState)
	k.idx = len(*h)
	*h = append(*h, k)
}
func (h *keyHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	k.idx = -1
	return k
}

// place puts k in h at time at, or moves it there.
func (h *keyHeap) place(k *keyState, at time.Time) {
	k.at = at
	if k.idx >= 0 {
		heap.Fix(h, k.idx)
		return
	}
	heap.Push(h, k)
}

// drop takes k out of h if it is there.
func (h *keyHeap) drop(k *keyState) {
	if k.idx >= 0 {
		heap.Remove(h, k.idx)
	}
}
