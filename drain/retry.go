package drain

import (
	"slices"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// A key's failed jobs and its retry budget: which job a key attempts at its
// slot, the fresh head or a retry. Pure bookkeeping of keyState, like
// keystate.go: no I/O, no clock, no lock of its own.

const (
	// maxAside bounds the failed jobs a key keeps stepped aside. With that
	// many, a further failure blocks the key as without a budget, until one
	// of them is delivered or dead-lettered: a key costs bounded memory.
	maxAside = 8
	// initialCredit is the retry credit a key starts with, so that a lone
	// failure is retried when its backoff ends, without waiting for fresh
	// deliveries to earn it.
	initialCredit = 1
	// resumeReads is how many head reads of a key after activation ask
	// Config.Resume about jobs stored before it: a previous drainer can
	// have tried, and kept, the key's head, maxAside jobs stepped aside and
	// a delivered job whose slot was still held, the oldest jobs stored.
	resumeReads = maxAside + 2
	// headJob stands for the key's head where a job is named by its index
	// in aside.
	headJob = -1
)

// tried is a job of a key read from the queue, with what befell it.
type tried struct {
	msg        *queue.Msg
	due        time.Time // when it may be tried again (a retry) or dead-lettered
	retrying   bool      // it was attempted and failed: its next attempt is a retry
	paused     bool      // its last attempt made the downstream ask the key to pause
	failures   int       // failed attempts that count
	history    []string  // what happened to it, for the dead letter
	deadReason string    // dead-letter it with this reason ("": deliver it)
}

// job returns the key's job i: headJob, or an index in aside.
func (k *keyState) job(i int) *tried {
	if i == headJob {
		return &k.head
	}
	return &k.aside[i]
}

// waitsRetry reports whether t is a failed job waiting for a retry.
func (t *tried) waitsRetry() bool { return t.msg != nil && t.retrying && t.deadReason == "" }

// waitsDead reports whether t is a job waiting for its dead letter.
func (t *tried) waitsDead() bool { return t.msg != nil && t.deadReason != "" }

// failing reports whether the key has failed jobs, at its head or aside;
// most keys have none, and their bookkeeping takes the short way.
func (k *keyState) failing() bool {
	return len(k.aside) > 0 || k.head.retrying || k.head.deadReason != ""
}

// fresh reports whether the key's head is a fresh job waiting for its slot.
func (k *keyState) fresh() bool {
	return k.head.msg != nil && !k.head.retrying && k.head.deadReason == ""
}

// earliest returns the job of the key, at its head or aside, that waits
// (as waiting says) with the earliest due, the head first on a tie; ok is
// false when none waits.
func (k *keyState) earliest(waiting func(*tried) bool) (i int, due time.Time, ok bool) {
	if !k.failing() {
		return 0, time.Time{}, false
	}
	for j := headJob; j < len(k.aside); j++ {
		if t := k.job(j); waiting(t) && (!ok || t.due.Before(due)) {
			i, due, ok = j, t.due, true
		}
	}
	return i, due, ok
}

// dueRetries returns the key's failed jobs waiting for a retry, in the
// order their retries go: earliest due first, the head first on a tie (as
// earliest picks them); nil, without allocating, when it has none.
func (k *keyState) dueRetries() []*tried {
	if !k.failing() {
		return nil
	}
	var dues []*tried
	for i := headJob; i < len(k.aside); i++ {
		if t := k.job(i); t.waitsRetry() {
			dues = append(dues, t)
		}
	}
	slices.SortStableFunc(dues, func(a, b *tried) int { return a.due.Compare(b.due) })
	return dues
}

// choose decides what the key attempts at now, if anything is due: job i
// (headJob, or an index in aside) in the slot scheduled. The fresh head
// takes the key's slot unless a retry is due in it and the key has a
// retry's credit, or the budget is unlimited; with no fresh job waiting a
// due retry goes whatever the credit, so no slot is left unused. The retry
// due is the one that has waited longest (the head first on a tie).
// deferred says a due retry gave the slot to the fresh head.
func (k *keyState) choose(now time.Time, unlimited bool) (i int, scheduled time.Time, deferred, ok bool) {
	if k.next.time().After(now) {
		return 0, time.Time{}, false, false
	}
	r, due, retry := k.earliest((*tried).waitsRetry)
	retry = retry && !due.After(now)
	fresh := k.fresh()
	switch {
	case retry && (!fresh || unlimited || k.credit >= 1):
		return r, maxTime(k.next.time(), due), false, true
	case fresh:
		return headJob, k.next.time(), retry, true
	}
	return 0, time.Time{}, false, false
}

// deadDue returns a job to dead-letter at now, if there is one: the head
// first, then the jobs aside in order.
func (k *keyState) deadDue(now time.Time) (int, bool) {
	if !k.failing() {
		return 0, false
	}
	for i := headJob; i < len(k.aside); i++ {
		if t := k.job(i); t.waitsDead() && !t.due.After(now) {
			return i, true
		}
	}
	return 0, false
}

// attemptAt returns when the key's next attempt may start, and false when
// it has no job to attempt: the key's slot for a fresh head, and for a
// retry the later of the slot and the end of its backoff.
func (k *keyState) attemptAt() (time.Time, bool) {
	if k.fresh() {
		return k.next.time(), true
	}
	if _, due, ok := k.earliest((*tried).waitsRetry); ok {
		return maxTime(k.next.time(), due), true
	}
	return time.Time{}, false
}

// deadAt returns when the key next dead-letters a job, and false when none
// is to be.
func (k *keyState) deadAt() (time.Time, bool) {
	_, at, ok := k.earliest((*tried).waitsDead)
	return at, ok
}

// retrying counts the key's failed jobs waiting for a retry or their dead
// letter.
func (k *keyState) retrying() int {
	n := len(k.aside)
	if k.head.msg != nil && (k.head.retrying || k.head.deadReason != "") {
		n++
	}
	return n
}

// unblock steps a failed head aside when there is room, so that the key's
// fresh jobs go on: the next head is read at now. Only with a budget. A
// job the downstream asked the key to pause for stays at the head, to be
// tried first when the pause ends: the whole key waits.
func (k *keyState) unblock(now time.Time) {
	if k.head.msg == nil || !k.head.retrying || k.head.paused || len(k.aside) >= maxAside {
		return
	}
	k.setAside(append(k.aside, k.head))
	k.from = max(k.from, k.head.msg.Seq+1)
	k.head = tried{}
	k.fetch, k.fetchAt = true, instantOf(now)
}

// earn records a fresh attempt under retry: it earns the key retry credit.
func (k *keyState) earn(retry Retry) {
	if retry.Budget >= 1 || !retry.stepsAside() {
		return
	}
	earn, ceiling := retry.earning()
	k.credit = min(k.credit+earn, ceiling)
}

// spend records a retry attempted: it uses a retry's credit, or what is
// left of one when it went for want of fresh jobs.
func (k *keyState) spend() { k.credit = max(k.credit-1, 0) }

// reread forgets the key's head and the jobs stepped aside, to read them
// again from the queue: on activation another drainer may have delivered
// them meanwhile, and on deactivation it will. Their sequences go back in
// seqs, so none is lost.
func (k *keyState) reread() {
	low := k.from
	keep := k.seqs[:0]
	for _, seq := range k.seqs {
		if seq >= k.from {
			keep = append(keep, seq)
		}
	}
	for i := headJob; i < len(k.aside); i++ {
		if t := k.job(i); t.msg != nil {
			keep = append(keep, t.msg.Seq)
			low = min(low, t.msg.Seq)
		}
	}
	slices.Sort(keep)
	k.seqs = slices.Compact(keep)
	k.from = low
	clear(k.aside)
	k.setAside(k.aside[:0])
	k.head = tried{}
	k.credit = initialCredit
}
