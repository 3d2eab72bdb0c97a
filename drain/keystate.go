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
	index int     // position in the heap, -1 when not in it
	at    instant // when the scheduler next looks at the key

	// The key's flags, together (the struct stays in its size class).
	busy     bool    // a step of the key is running (or reporting its events)
	wake     bool    // a job was stored while busy: read the head again if the queue looked empty
	reserved bool    // next is a slot already reserved under the total cap
	fetch    bool    // the head must be read (not before fetchAt)
	unsure   bool    // jobs of the key may be stored that seqs lacks (see lost)
	seek     bool    // the next read looks for the first job stored from seekFrom on (Queue.Next)
	retry    retryOf // which of due, fetchAt, pendingAt wait to retry a failed queue call
	// resumeLeft is how many head reads left ask Config.Resume (see
	// resumeReads, a few).
	resumeLeft uint8

	head   tried   // the head job, read ahead of its slot (head.msg nil: none)
	aside  []tried // failed jobs stepped aside for the fresh ones, at most maxAside
	credit float64 // retries the budget allows while fresh jobs wait
	next   instant // earliest start of the key's next attempt: its slot grid, a pause, a reserved slot
	// last and lastStart are the slot of the key's last attempt and when it
	// started, paused the end of the last pause the downstream asked for:
	// a new pace plans next from them (replan).
	last, lastStart, paused instant
	tallied                 int64    // the jobs waiting the Drainer's tally counts for the key
	from                    uint64   // read the head from this sequence on
	seqs                    []uint64 // sequences Watch reported, not yet read (ascending): every job of the key from `from` on

	pend      []uint64 // delivered jobs whose slots are not yet freed
	pendingAt instant  // when to free them if no delivery does it first
	freedAt   instant  // when this drainer last saw a removal of its own lower the depth

	fetchAt  instant // read the head, if fetch, not before this (see Drainer.headReadAt)
	seekFrom uint64  // where the next seek starts

	notified uint64              // highest sequence Watch reported
	early    map[uint64]struct{} // removed before Watch reported them
	depth    int64               // jobs stored for the key, as far as the drainer saw; set by setDepth

	// counts are the Drainer's figures over its keys, which the key's
	// depth and aside count in (setDepth, setAside); nil: none (a key
	// forgotten, or made by a test).
	counts   *keyCounts
	up, down *keyState // the keys before and after it at its level of the keys by depth (counts.go)

	// step is the key's step while one runs (a key is in one step at a
	// time), nil otherwise: steps come from the Drainer's pool, so that a
	// key waiting for its slot does not carry one.
	step *step

	flight flights // deliveries awaiting their receipt (concurrency.go)
}

func newKeyState(token, name string) *keyState {
	return &keyState{token: token, name: name, index: -1, credit: initialCredit, resumeLeft: resumeReads}
}

// reuse makes k the state of a new key, keeping the room of its slices.
func (k *keyState) reuse(token, name string) {
	seqs, pend, aside := k.seqs[:0], k.pend[:0], k.aside[:0]
	*k = *newKeyState(token, name)
	k.seqs, k.pend, k.aside = seqs, pend, aside
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
	k.setDepth(k.depth + 1)
	return true, true
}

// removed records that the job at seq left the queue, and says whether the
// key's depth fell. A job Watch has not reported yet is remembered in early,
// so that its notice, when it comes, does not count it.
func (k *keyState) removed(seq uint64) (counted bool) {
	if seq <= k.notified {
		k.setDepth(k.depth - 1)
		return true
	}
	if k.early == nil {
		k.early = make(map[uint64]struct{})
	}
	k.early[seq] = struct{}{}
	return false
}

// delivered records that job i (headJob, or an index in aside) was handed
// to the sink: it keeps its queue slot until until (holdEnd).
func (k *keyState) delivered(i int, until time.Time) {
	seq := k.drop(i)
	k.pend = append(k.pend, seq)
	k.pendingAt = instantOf(until)
}

// buried records that job i was dead-lettered and removed, and says
// whether the key's depth fell.
func (k *keyState) buried(i int) (counted bool) {
	return k.removed(k.drop(i))
}

// drop takes job i (headJob, or an index in aside) off the key, done with,
// and returns its sequence. Reads go on after the head.
func (k *keyState) drop(i int) (seq uint64) {
	if i == headJob {
		seq = k.head.msg.Seq
		k.head = tried{}
		k.from = max(k.from, seq+1)
		return seq
	}
	seq = k.aside[i].msg.Seq
	k.setAside(slices.Delete(k.aside, i, i+1))
	return seq
}

// freed records that the first n pending slots were freed, and returns how
// many of them counted toward the depth.
func (k *keyState) freed(n int) (counted int) {
	for _, seq := range k.pend[:n] {
		if k.removed(seq) {
			counted++
		}
	}
	k.pend = append(k.pend[:0], k.pend[n:]...) // keeps its room for the next deliveries
	return counted
}

// headAt records m as the key's head, read at now by a read due since
// since: a fresh job, due at the key's next slot, or when the key was idle
// for more than an interval (its pacing has lapsed) since the read fell
// due, never before that slot. Dating it from the read, not from its
// answer, keeps the key's place in the schedule: a key read while many
// others wait for their reads (a start-up on a queue holding many keys)
// delivers before the keys that fell due after it are read, instead of
// after every one of them.
func (k *keyState) headAt(m *queue.Msg, since, now time.Time, interval time.Duration) {
	k.head = tried{msg: m}
	if k.next.time().Before(now.Add(-interval)) {
		k.next = instantOf(maxTime(k.next.time(), since))
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
	if i == len(k.seqs) {
		k.seqs = k.seqs[:0] // keeps its room for the next notices
	} else {
		k.seqs = k.seqs[i:]
	}
	return append(plan, k.seqs[:min(len(k.seqs), readAhead)]...)
}

// toRead reports whether Watch reported jobs of the key from `from` on,
// which a read of the head would try.
func (k *keyState) toRead() bool {
	return len(k.seqs) > 0 && k.seqs[len(k.seqs)-1] >= k.from
}

// toReadCount counts the sequences Watch reported from `from` on: seqs keeps
// those below until the next read drops them (readPlan).
func (k *keyState) toReadCount() int {
	i, _ := slices.BinarySearch(k.seqs, k.from)
	return len(k.seqs) - i
}

// readAhead is how many reported sequences one step tries at most before
// it gives up reading the head (jobs removed by another drainer).
const readAhead = 4

// headLead is how long before its next slot a key whose slots are more
// than twice this apart reads its next head (Drainer.headReadAt): a key waiting for a
// slot that far holds no job in memory (its payload and headers, about 300
// bytes), at the cost of one more step per delivery. A key with closer
// slots, or whose deliveries fly, reads its next head as soon as the one
// before is delivered.
const headLead = 250 * time.Millisecond

// forget drops the sequences a read found gone for good, which the depth
// may still count (doubt).
func (k *keyState) forget(missing []uint64) {
	if len(missing) > 0 {
		k.seqs = slices.DeleteFunc(k.seqs, func(seq uint64) bool { return slices.Contains(missing, seq) })
		k.doubt()
	}
}

// doubt records that jobs of the key may be stored that seqs lacks: its
// list was trimmed on a guess, or reads found jobs gone that the depth
// still counts. A seek then starts from the first sequence.
func (k *keyState) doubt() {
	k.unsure, k.seekFrom = true, 0
}

// lost reports whether the key has run out of its list while its depth
// counts more jobs than it knows where to find: the next read then seeks
// the key's first job stored from seekFrom on (Queue.Next), and finding
// none, sets the depth to the jobs it knows. A key unsure of its list,
// after a take-over, misses the jobs the previous drainer stepped aside
// while it delivered later ones, which a trimmed list lacks. A key sure of
// it has counted a job twice: one stored while the server counted the
// queue's depths (resync), reported above the count's last sequence.
// Left counted, such a job would never come, and every answer about the
// key would wait for it.
func (k *keyState) lost() bool {
	return !k.toRead() && k.head.msg == nil && k.depth > k.known()
}

// known counts the jobs of the key the drainer knows where to find.
func (k *keyState) known() int64 {
	n := len(k.pend) + len(k.aside) + k.toReadCount() + len(k.flight.air()) + len(k.flight.back())
	if k.head.msg != nil {
		n++
	}
	return int64(n)
}

// resync sets a passive drainer's depth of the key from the queue's count
// of its jobs, stored, which holds every job stored up to highest, once
// Watch has reported those: jobs reported above highest come on top. The
// drainer on another shaper removes a key's jobs oldest first, so of the
// sequences reported up to highest the newest stored are the ones left —
// but for the failed jobs a retry budget keeps while later ones go: a key
// whose list was trimmed seeks them once the list runs out (lost).
func (k *keyState) resync(stored, highest uint64) {
	k.setDepth(int64(stored) + int64(countAbove(k.seqs, highest)))
	if trimOldest(&k.seqs, highest, int(stored)) {
		// Another drainer with a retry budget keeps failed jobs while it
		// delivers later ones: the oldest may be stored after all.
		k.doubt()
	}
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
// *seqs (ascending), keeping keep of them and every sequence above highest,
// and says whether it dropped any.
func trimOldest(seqs *[]uint64, highest uint64, keep int) bool {
	upTo := len(*seqs) - countAbove(*seqs, highest)
	drop := upTo - keep
	if drop > 0 {
		*seqs = append((*seqs)[:0], (*seqs)[drop:]...)
	}
	return drop > 0
}

// nextEvent returns when the key next needs the scheduler, and false when it
// needs nothing (idle); readAt is when its head is read, if it must be
// (Drainer.headReadAt).
func (k *keyState) nextEvent(readAt time.Time) (time.Time, bool) {
	var at time.Time
	ok := false
	consider := func(t time.Time) {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	if t, has := k.attemptAt(); has && !k.flight.blocked {
		consider(t)
	}
	if t, has := k.deadAt(); has {
		consider(t)
	}
	if len(k.pend) > 0 {
		consider(k.pendingAt.time())
	}
	if k.fetch && k.head.msg == nil {
		// A read waits for the head to go (stepFor reads only then): a
		// key woken by a job stored while a step of it ran keeps its
		// head, and falling due for that read would find nothing to do,
		// again and again at the same instant.
		consider(readAt)
	}
	return at, ok
}

// status returns the key's KeyStatus at now, with the times from d's
// schedule. d.mu must be held.
func (d *Drainer) status(k *keyState, now time.Time) KeyStatus {
	// A job in delivery has its slot: the key's fresh jobs come after it.
	st := KeyStatus{Queued: k.depth, Waiting: k.waitingTurn(), Seen: max(k.notified, d.seen.seq), Retrying: k.retrying(), FreedAt: k.freedAt.time()}
	room := d.firstAttempt(k, now).Add(d.hold) // the next attempt, assumed to succeed
	switch {
	case len(k.pend) > 0 && k.pendingAt.time().After(now):
		room = k.pendingAt.time() // a job delivered keeps its slot until then
	case len(k.pend) > 0:
		st.Freeing = int64(len(k.pend)) // their slots are being freed now
	}
	st.RoomIn = max(room.Sub(now), 0)
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

func (h keyHeap) Len() int { return len(h) }
func (h keyHeap) Less(i, j int) bool {
	// On a tie, the key whose jobs came first: keys due at one instant take
	// the total cap's slots in the order their jobs came (the schedule,
	// plan.go, counts them so).
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].notified < h[j].notified
}
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
	k.at = instantOf(at)
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

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
