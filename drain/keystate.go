package drain

import (
	"container/heap"
	"slices"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// keyState is everything a Drainer knows about one key. It is guarded by
// Drainer.mu; while busy, a worker owns the I/O for the key and nobody else
// touches its queue, which is what keeps each key FIFO. Its methods are the
// key's bookkeeping, with no I/O, no clock and no locking of their own.
type keyState struct {
	token string
	name  string
	index int       // position in the heap, -1 when not in it
	at    time.Time // when the scheduler next looks at the key

	busy bool // a step of the key is running (or reporting its events)
	wake bool // a job was stored while busy: read the head again if the queue looked empty

	held       *queue.Msg // the head job, read ahead of its slot
	due        time.Time  // when held may start (its slot)
	reserved   bool       // due is a slot already reserved under the total cap
	failures   int        // failed attempts of held that count
	history    []string   // what happened to held, for the dead letter
	deadReason string     // dead-letter held with this reason ("": deliver it)
	next       time.Time  // earliest start of the key's next delivery (pacing)
	from       uint64     // read the head from this sequence on
	seqs       []uint64   // sequences Watch reported, not yet read (ascending): every job of the key from `from` on

	pend      []uint64  // delivered jobs whose slots are not yet freed
	pendingAt time.Time // when to free them if no delivery does it first

	fetch   bool      // the head must be read
	fetchAt time.Time // not before this

	notified uint64              // highest sequence Watch reported
	early    map[uint64]struct{} // removed before Watch reported them
	depth    int64               // jobs stored for the key, as far as the drainer saw

	step step // the key's step, reused: a key is in one step at a time
}

func newKeyState(token, name string) *keyState {
	return &keyState{token: token, name: name, index: -1}
}

// reuse makes k the state of a new key, keeping the room of its slices.
func (k *keyState) reuse(token, name string) {
	seqs, pend, s := k.seqs[:0], k.pend[:0], k.step
	*k = keyState{token: token, name: name, index: -1, seqs: seqs, pend: pend}
	k.step.remove, k.step.exact, k.step.missing = s.remove[:0], s.exact[:0], s.missing[:0]
}

// notice records that Watch reported the job at seq. news is false for a
// sequence already reported (a watch that restarted); counted says whether
// the key's depth grew: not for a job removed before it was reported.
func (k *keyState) notice(seq uint64) (news, counted bool) {
	if seq <= k.notified {
		return false, false
	}
	k.notified = seq
	if seq >= k.from {
		k.seqs = append(k.seqs, seq)
	}
	if _, ok := k.early[seq]; ok {
		delete(k.early, seq)
		return true, false
	}
	k.depth++
	return true, true
}

// removed records that the job at seq left the queue, and says whether the
// key's depth fell. A job Watch has not reported yet is remembered in early,
// so that its notice, when it comes, does not count it.
func (k *keyState) removed(seq uint64) (counted bool) {
	if seq <= k.notified {
		k.depth--
		return true
	}
	if k.early == nil {
		k.early = make(map[uint64]struct{})
	}
	k.early[seq] = struct{}{}
	return false
}

// delivered records that the held job, at seq and scheduled for scheduled,
// was handed to the sink at started: the key's next slot follows on its
// grid, and the job keeps its queue slot until started+hold.
func (k *keyState) delivered(seq uint64, scheduled, started time.Time, interval, hold time.Duration) {
	k.held, k.failures, k.history, k.deadReason = nil, 0, nil, ""
	k.next = nextSlot(scheduled, started, interval)
	k.from = seq + 1
	k.pend = append(k.pend, seq)
	k.pendingAt = started.Add(hold)
}

// buried records that the held job, at seq, was dead-lettered and removed,
// and says whether the key's depth fell.
func (k *keyState) buried(seq uint64) (counted bool) {
	k.held, k.failures, k.history, k.deadReason = nil, 0, nil, ""
	k.from = seq + 1
	return k.removed(seq)
}

// freed records that the first n pending slots were freed, and returns how
// many of them counted toward the depth.
func (k *keyState) freed(n int) (counted int) {
	for _, seq := range k.pend[:n] {
		if k.removed(seq) {
			counted++
		}
	}
	k.pend = k.pend[n:]
	return counted
}

// headAt records m as the key's head, read at now: it is due at the key's
// next slot, or at once when the key was idle for more than an interval
// (its pacing has lapsed).
func (k *keyState) headAt(m *queue.Msg, now time.Time, interval time.Duration) {
	k.held = m
	k.due = k.next
	if k.next.Before(now.Add(-interval)) {
		k.due = now
	}
	k.wake = false
}

// readPlan appends to plan the sequences to read the head at, in order,
// when the head is read from sequence from on: the first few Watch
// reported. Those below from are forgotten (delivered or skipped).
func (k *keyState) readPlan(plan []uint64, from uint64) []uint64 {
	i := 0
	for i < len(k.seqs) && k.seqs[i] < from {
		i++
	}
	k.seqs = k.seqs[i:]
	return append(plan, k.seqs[:min(len(k.seqs), readAhead)]...)
}

// readAhead is how many reported sequences one step tries at most before
// it gives up reading the head (jobs removed by another drainer).
const readAhead = 4

// forget drops the sequences a read found gone for good.
func (k *keyState) forget(missing []uint64) {
	if len(missing) > 0 {
		k.seqs = slices.DeleteFunc(k.seqs, func(seq uint64) bool { return slices.Contains(missing, seq) })
	}
}

// resync sets a passive drainer's depth of the key from the queue's count
// of its jobs, stored, taken after the key's notices up to highest: jobs
// reported later come on top. The drainer on another shaper removes a
// key's jobs oldest first, so of the sequences reported up to highest the
// newest stored are the ones left.
func (k *keyState) resync(stored, highest uint64) {
	k.depth = int64(stored) + int64(countAbove(k.seqs, highest))
	trimOldest(&k.seqs, highest, int(stored))
}

// idle reports whether the key has nothing left to do, so that it can be
// forgotten once its pacing no longer matters.
func (k *keyState) idle() bool { return k.depth <= 0 && len(k.early) == 0 }

// countAbove counts the sequences in seqs (ascending) above highest.
func countAbove(seqs []uint64, highest uint64) int {
	n := 0
	for i := len(seqs) - 1; i >= 0 && seqs[i] > highest; i-- {
		n++
	}
	return n
}

// trimOldest drops the oldest of the sequences at or below highest in
// *seqs (ascending), keeping keep of them and every sequence above highest.
func trimOldest(seqs *[]uint64, highest uint64, keep int) {
	upTo := len(*seqs) - countAbove(*seqs, highest)
	if drop := upTo - keep; drop > 0 {
		*seqs = append((*seqs)[:0], (*seqs)[drop:]...)
	}
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

// status returns the key's KeyStatus at now, for slots every interval held
// for hold after their delivery.
func (k *keyState) status(now time.Time, hold time.Duration) KeyStatus {
	st := KeyStatus{Queued: k.depth, Waiting: max(k.depth-int64(len(k.pend)), 0), Seen: k.notified}
	var room time.Time
	switch {
	case len(k.pend) > 0:
		room = k.pendingAt
	case k.held != nil:
		room = k.due.Add(hold)
	case k.busy:
		room = now.Add(hold)
	default:
		room = maxTime(k.next, now).Add(hold)
	}
	st.RoomIn = max(room.Sub(now), 0)
	next := maxTime(k.next, now)
	if k.held != nil {
		next = maxTime(k.due, now)
	}
	st.NextIn = next.Sub(now)
	return st
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// keyHeap orders keys by the time they next need the scheduler.
type keyHeap []*keyState

var _ heap.Interface = (*keyHeap)(nil)

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h keyHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *keyHeap) Push(x any) {
	k := x.(*keyState)
	k.index = len(*h)
	*h = append(*h, k)
}
func (h *keyHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	k.index = -1
	return k
}

// place puts k in h at time at, or moves it there.
func (h *keyHeap) place(k *keyState, at time.Time) {
	k.at = at
	if k.index >= 0 {
		heap.Fix(h, k.index)
		return
	}
	heap.Push(h, k)
}

// drop takes k out of h if it is there.
func (h *keyHeap) drop(k *keyState) {
	if k.index >= 0 {
		heap.Remove(h, k.index)
	}
}
