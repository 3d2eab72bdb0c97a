package drain

import (
	"context"
	"math"
	"slices"
	"time"
)

// The drain's one schedule: when would the n-th fresh job of a key start,
// and when does the key next have room. The answers the shaper gives
// producers (an accepted job's ETA, a full key's Retry-After, a deferred
// job's expected start) are read from here, from the state the scheduler
// acts on, never re-derived beside it.
//
// A key's attempts follow its slot grid (Pace.Interval apart from its next
// slot, which already holds a pause the downstream asked for and a slot
// reserved under the total cap). Failed jobs waiting for a retry take
// slots too: with a retry budget, a due retry takes a slot when the key
// has a retry's credit, as choose decides; without one, the failed head
// goes first, once its backoff has ended. Under a total cap, keys with
// jobs left take the policy's slots in turn (in the order they fall due),
// so a key's j-th attempt comes one round after its (j−1)-th: a round is
// one total interval per key that still has j jobs waiting, and at least
// the key's own interval. A key that has not reserved its next slot under
// the cap gets it after the slots reserved already.
//
// The schedule assumes every attempt ahead succeeds; a failure moves what
// comes after by the slots its retries take. Jobs stored but not yet
// reported by the watch are not in it: the caller says how many of its own
// key's jobs it knows of (the job it just stored).

// waitTally counts the keys by how many jobs each has waiting, for the
// rounds under a total cap: at[m-1] is how many keys have at least m jobs
// waiting. It is guarded by the Drainer's mu.
type waitTally struct {
	at []int32
}

// set moves a key's count from old to n jobs waiting.
func (w *waitTally) set(old, n int64) {
	for m := old; m < n; m++ { // levels old+1 … n gain the key
		if int(m) == len(w.at) {
			w.at = append(w.at, 0)
		}
		w.at[m]++
	}
	for m := n; m < old; m++ { // levels n+1 … old lose it
		w.at[m]--
	}
	for len(w.at) > 0 && w.at[len(w.at)-1] == 0 {
		w.at = w.at[:len(w.at)-1]
	}
}

// keys returns how many keys have at least m jobs waiting.
func (w *waitTally) keys(m int64) int64 {
	if m < 1 || m > int64(len(w.at)) {
		return 0
	}
	return int64(w.at[m-1])
}

// tally brings k's count in d.waiting up to date: call it whenever k's
// depth or delivered-but-held jobs may have changed. d.mu must be held.
func (d *Drainer) tally(k *keyState) {
	if n := k.waiting(); n != k.tallied {
		d.waiting.set(k.tallied, n)
		k.tallied = n
	}
}

// waitingTurn is waiting less the job being delivered now, which has its
// slot: the jobs that wait for a slot of their own.
func (k *keyState) waitingTurn() int64 {
	n := k.waiting()
	if k.delivering() && n > 0 {
		n--
	}
	return n
}

// waiting is how many of the key's jobs wait for an attempt: stored, and
// not delivered (a delivered job keeps its slot for a while). A job being
// delivered now still counts: see delivering.
func (k *keyState) waiting() int64 {
	return max(k.depth-int64(len(k.pend))-int64(len(k.flight.air())), 0)
}

// delivering reports whether a step is handing one of the key's jobs to
// the sink now: that job took its slot already, and waits for none.
func (k *keyState) delivering() bool { return k.busy && k.step != nil && k.step.deliver != nil }

// StartIn returns how long from now until the n-th fresh job of key token
// would start (n = 1: its first job not yet attempted, in submission
// order), given everything ahead of it: the key's slot grid and any pause,
// the failed jobs whose retries take slots first, and the policy's total
// cap shared with the other keys. n counts fresh jobs the Drainer has seen
// and, beyond them, jobs stored that it has not seen yet (a job the caller
// just stored). For a key the Drainer has not seen, the first job starts
// when the total cap lets it, or at once.
func (d *Drainer) StartIn(token string, n int64, now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.keys[token]
	if k == nil {
		k = &keyState{notified: math.MaxUint64} // its jobs come after every job seen
	}
	return max(d.start(k, n, now).Sub(now), 0)
}

// Stored answers for a job of key token just stored at seq, in one call:
// the key's status, counting the job when the watch has not reported it
// yet (Queued, Waiting), and how long from now until the job would start
// (StartIn of its place among the key's fresh jobs: the last). With wait
// above 0 it first waits that long at most for the watch to report the
// job (AwaitSeen) when it has not: under a total cap a job's start depends
// on every key's jobs stored before it, and the watch is a moment behind
// the store's acknowledgement.
func (d *Drainer) Stored(token string, seq uint64, now time.Time, wait time.Duration) (KeyStatus, time.Duration) {
	return storedSeen(func() (KeyStatus, time.Duration) { return d.stored(token, seq, now) }, d.AwaitSeen, seq, wait)
}

// storedSeen answers with stored, asked again once await saw seq (waiting
// at most wait) when its first answer had not seen it.
func storedSeen(stored func() (KeyStatus, time.Duration), await func(context.Context, uint64) bool, seq uint64, wait time.Duration) (KeyStatus, time.Duration) {
	st, in := stored()
	if seq <= st.Seen || wait <= 0 {
		return st, in
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if await(ctx, seq) {
		st, in = stored()
	}
	return st, in
}

// stored is Stored without waiting.
func (d *Drainer) stored(token string, seq uint64, now time.Time) (KeyStatus, time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.keys[token]
	var st KeyStatus
	if k == nil {
		st = KeyStatus{RoomIn: d.intervalOf(token), Seen: d.seen.seq}
		k = &keyState{notified: math.MaxUint64} // its jobs come after every job seen
	} else {
		st = d.status(k, now)
	}
	fresh := max(st.Waiting-int64(st.Retrying), 0)
	if seq > st.Seen {
		st.Queued, st.Waiting, fresh = st.Queued+1, st.Waiting+1, fresh+1
	} else if after := int64(countAbove(k.seqs, seq)); after > 0 {
		// Jobs of the key stored after this one (a burst of the key's
		// producers at once) come after it: the answer is the job's
		// place, not the key's last.
		st.Queued, st.Waiting, fresh = max(st.Queued-after, 0), max(st.Waiting-after, 0), fresh-after
		if fresh <= 0 {
			return st, 0
		}
	} else if fresh == 0 {
		// Seen, and none of the key's jobs waits: the job, its last, has
		// started already (a drainer can deliver it before its producer
		// is answered).
		return st, 0
	}
	return st, max(d.start(k, fresh, now).Sub(now), 0)
}

// start returns when k's n-th fresh job would start. d.mu must be held.
func (d *Drainer) start(k *keyState, n int64, now time.Time) time.Time {
	return d.attempt(k, max(n, 1), nil, now)
}

// attempt walks k's slots as start says: when its n-th fresh job would
// start (mine nil), or when its failed job mine would be retried, n being
// how many fresh jobs the key has waiting, which take the slots the
// retries leave (once none is left, a retry goes at its due); mine is one
// of k.dueRetries(). d.mu must be held.
func (d *Drainer) attempt(k *keyState, n int64, mine *tried, now time.Time) time.Time {
	retry := d.pace.Retry
	// The failed jobs waiting for a retry, and the key's first attempt:
	// at its next slot; but when its failed head blocks it, once the
	// head's backoff has ended (no budget, or the downstream asked the key
	// to pause), or once the first retry is due (no room aside: then the
	// head steps aside), in an attempt of its own.
	rounds := d.roundsOf(k, now)
	at := maxTime(maxTime(k.next.time(), d.freeAt(k, now)), d.nextAfterFlight(k))
	dues := k.dueRetries()
	var first *tried // the failed job that takes the key's first attempt
	switch head := &k.head; {
	case !head.waitsRetry():
	case !retry.stepsAside() || head.paused:
		first = head
	case len(k.aside) >= maxAside:
		first = dues[0]
	}
	if first != nil {
		at = maxTime(at, first.due)
		dues = slices.DeleteFunc(dues, func(t *tried) bool { return t == first })
	}
	if !k.reserved {
		at = rounds.enter(at, now, d.totalNext)
	}
	credit := k.credit
	earn, ceiling := retry.earning()
	for j := int64(1); ; j++ {
		if j > 1 {
			at = at.Add(rounds.gap(j, at))
		}
		noFresh := mine != nil && n <= 0 && first == nil
		if noFresh {
			at = maxTime(at, dues[0].due) // with no fresh job left, the next retry goes when due
		}
		if len(dues) > 0 && !dues[0].due.After(at) && (credit >= 1 || retry.Budget >= 1 || noFresh) {
			// A due retry takes the slot while the key has credit.
			if dues[0] == mine {
				return at
			}
			dues = dues[1:]
			credit = max(credit-1, 0)
			continue
		}
		switch {
		case first != nil: // the slot of the key's first attempt
			if first == mine {
				return at
			}
			first = nil
		case mine == nil:
			if n--; n == 0 {
				return at
			}
		default:
			n--
		}
		if retry.stepsAside() && retry.Budget < 1 {
			credit = min(credit+earn, ceiling)
		}
		if len(dues) == 0 && mine == nil {
			return rounds.later(j, n, at)
		}
	}
}

// firstAttempt returns when k's next attempt may start, of whatever job:
// its next slot (or now), or for a failed job when its backoff ends; and
// under a total cap, when it has not reserved a slot yet, the slot it
// gets then. d.mu must be held.
func (d *Drainer) firstAttempt(k *keyState, now time.Time) time.Time {
	at := d.asksAt(k, now)
	if k.reserved || d.totalInterval() <= 0 {
		return at
	}
	r := d.roundsOf(k, now)
	return r.enter(at, now, d.totalNext)
}

// asksAt returns when k's next attempt may start, of whatever job, before
// the total cap: its next slot, or when its failed head blocks it, the
// end of the head's backoff; and not before a delivery in the air lets it.
// A key holding no slot under the cap asks for one then (step). d.mu must
// be held.
func (d *Drainer) asksAt(k *keyState, now time.Time) time.Time {
	at, ok := k.attemptAt()
	if !ok {
		at = k.next.time()
	}
	return maxTime(at, d.freeAt(k, now))
}

// rounds is how one key's attempts are spaced: its interval, and under a
// total cap, the rounds in which the keys with jobs left take the
// policy's slots in turn. Keys keep their order from round to round (each
// takes the cap's next slot once its own slot has come, after the keys
// that took theirs before it), so between a key's (j−1)-th and j-th
// attempts come the keys after it with a (j−1)-th job and the keys before
// it with a j-th. The order is the keys' order under the cap now: by the
// slots they reserved, then those without one.
//
// With at most exactKeys keys waiting, the Drainer counts the keys before
// and after the asking one by how many jobs each has: the rounds are then
// exact (while nothing else arrives), at a cost of about 15 ns per key
// waiting, paid only while the cap binds. With more, it counts only how
// far the key stands in its round now, and takes the keys of the later
// rounds to be spread alike around it: an estimate, off by several slots
// when the keys' depths differ much.
type rounds struct {
	interval, total time.Duration
	tally           *waitTally
	tallied         int64 // the key's jobs waiting, as the tally counts them
	// before[m-1] and after[m-1] count the other keys with at least m
	// jobs waiting before and after the key, when counted (exact); else
	// share is the part of the other keys before it.
	before, after []int64
	share         float64
	// late holds the other keys after the key that ask for their next
	// slot only later than the key's next attempt and its interval (a
	// retry's backoff, a pause), by when they ask, when counted (exact):
	// each joins the rounds at the first of the key's attempts it asks
	// before (lateJoin).
	late lateKeys
	// unreserved counts the keys with no slot under the cap that take one
	// before the key does, when counted (exact); ready holds when each
	// of them may ask for it.
	unreserved int64
	ready      []time.Time
	// shift counts the other keys' rounds that pass before the key takes
	// its first slot, when it asks for one only then (a pause, a retry's
	// backoff): it then comes after every other key of its first round.
	shift int64
}

// exactKeys bounds the keys a question about the rounds looks at one by
// one.
const exactKeys = 4096

// roundsOf returns the rounds of k. d.mu must be held.
func (d *Drainer) roundsOf(k *keyState, now time.Time) rounds {
	r := rounds{interval: d.plannedInterval(k), total: d.totalInterval(), tally: &d.waiting, tallied: k.tallied}
	if r.total <= 0 || time.Duration(d.waiting.keys(1)+1)*r.total <= r.interval {
		return r // the cap never binds the key: its interval spaces its attempts
	}
	// Where a key stands under the cap: its reserved slot, or after every
	// slot reserved, those without one in the order they ask for one.
	place := func(x *keyState, asks time.Time) time.Time {
		if x.reserved {
			return x.next.time()
		}
		return maxTime(d.totalNext, now).Add(asks.Sub(now) + time.Duration(1)<<62/2)
	}
	myAsks := d.asksAt(k, now)
	mine := place(k, myAsks)
	// When no slot is reserved ahead, the keys without one that ask before
	// k take theirs first (rounds.enter): when they ask is kept for it.
	// Otherwise it is not needed, and nothing is kept per key asked.
	keepReady := !d.totalNext.After(now)
	if d.waiting.keys(1) <= exactKeys {
		depth := len(d.waiting.at)
		lateAfter := myAsks.Add(r.interval) // no sooner than the key's second ask
		r.before, r.after = make([]int64, depth), make([]int64, depth)
		for _, x := range d.keys {
			w := x.tallied
			if x.delivering() {
				w-- // its job in delivery has its slot
			}
			if x == k || w <= 0 {
				continue
			}
			var asks time.Time
			if !x.reserved {
				asks = d.asksAt(x, now)
			}
			// x takes its slot before k; on a tie, the key whose jobs came first
			before := asksFirst(place(x, asks), x.notified, mine, k.notified)
			switch {
			case before:
				r.before[w-1]++
				if !x.reserved && !x.delivering() && !k.reserved {
					r.unreserved++ // it takes a slot under the cap before k asks for one
					if keepReady {
						r.ready = append(r.ready, asks)
					}
				}
			case !x.reserved && !asksFirst(asks, x.notified, lateAfter, k.notified):
				r.late.add(asks, x.notified, w) // it joins the rounds later
			default:
				r.after[w-1]++
			}
		}
		for m := depth - 2; m >= 0; m-- { // at least m+1 jobs
			r.before[m] += r.before[m+1]
			r.after[m] += r.after[m+1]
		}
		r.late.sort(k.notified)
		return r
	}
	others := r.others(1)
	ahead := float64(maxTime(d.totalNext, now).Sub(now)) / float64(r.total) // every slot reserved
	if k.reserved {
		ahead = float64(k.next.time().Sub(now)) / float64(r.total)
	}
	r.share = min(max(ahead, 0), float64(others)) / float64(max(others, 1))
	return r
}
