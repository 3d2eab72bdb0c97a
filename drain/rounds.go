package drain

import (
	"cmp"
	"slices"
	"time"
)

// afterReady returns when a key ready at at gets its slot under the cap
// when no slot is reserved ahead: after the slots the keys in r.ready take,
// each when it is ready and a cap's interval after the one before.
func (r *rounds) afterReady(at time.Time) time.Time {
	if len(r.ready) == 0 {
		return at
	}
	slices.SortFunc(r.ready, time.Time.Compare)
	last := r.ready[0]
	for _, ready := range r.ready[1:] {
		last = maxTime(ready, last.Add(r.total))
	}
	return maxTime(at, last.Add(r.total))
}

// enter returns when the key, ready for its next attempt at at and
// holding no slot under the total cap, gets one: the first slot after
// those reserved when it asks. Asking before the slots reserved now have
// passed, it gets the one after them. Asking later, while the cap binds,
// it finds about as many slots reserved ahead as there are now, from the
// keys that still have jobs by then: every other key takes the cap's next
// slot again soon after its last. It comes after every other key in its
// rounds; enter records how many rounds the others go through before it
// asks.
func (r *rounds) enter(at, now, totalNext time.Time) time.Time {
	if r.total <= 0 {
		return at
	}
	if first := maxTime(totalNext, now); !at.After(first) {
		return first.Add(time.Duration(r.unreserved) * r.total)
	}
	ahead := totalNext.Sub(now)
	if ahead <= 0 {
		// No slot is reserved ahead (the cap was just set, or idle): the
		// keys without one that ask before the key take theirs first, a
		// cap's interval apart.
		return r.afterReady(at)
	}
	for wait := at.Sub(now); r.others(r.shift+1) > 0; r.shift++ {
		round := max(r.interval, time.Duration(r.others(r.shift+1))*r.total)
		if wait < round {
			break
		}
		wait -= round
	}
	r.share, r.before, r.after, r.late = 1, nil, nil, lateKeys{} // after every other key
	return at.Add(min(ahead, time.Duration(r.others(r.shift+1))*r.total))
}

// others counts the keys other than the asking one with at least m jobs
// waiting.
func (r *rounds) others(m int64) int64 {
	n := r.tally.keys(m)
	if r.tallied >= m {
		n-- // the key itself
	}
	return n
}

// between counts the other keys' attempts between the key's (j−1)-th and
// j-th.
func (r *rounds) between(j int64, ask time.Time) float64 {
	j += r.shift
	if r.before != nil {
		return float64(level(r.after, j-1) + level(r.before, j) + r.late.in(j, ask))
	}
	return (1-r.share)*float64(r.others(j-1)) + r.share*float64(r.others(j))
}

// level returns counts[m-1], 0 beyond it.
func level(counts []int64, m int64) int64 {
	if m < 1 || m > int64(len(counts)) {
		return 0
	}
	return counts[m-1]
}

// gap returns the time between the key's (j−1)-th attempt, at prev, and
// its j-th. Asked for j = 2, 3, … in turn.
func (r *rounds) gap(j int64, prev time.Time) time.Duration {
	if r.total <= 0 {
		return r.interval
	}
	return max(r.interval, time.Duration((r.between(j, prev.Add(r.interval))+1)*float64(r.total)))
}

// later returns when the n-th attempt after the key's j-th, at at, would
// start, with no retry left to place: once no other key has that many
// jobs, or a round is no longer than the key's interval, every gap is the
// same, and the rest is a product.
func (r *rounds) later(j, n int64, at time.Time) time.Time {
	for ; n > 0; n-- {
		j++
		if o := r.others(j - 1 + r.shift); r.late.settled(j) && (r.total <= 0 || o == 0 || time.Duration(o+1)*r.total <= r.interval) {
			return at.Add(time.Duration(n) * r.gap(j, at))
		}
		at = at.Add(r.gap(j, at))
	}
	return at
}

// lateKeys are the other keys that join a key's rounds later than its
// next attempt (rounds.late): each takes a slot between the key's
// (j−1)-th and j-th attempts from the first j whose ask (when the key
// asks for its j-th slot) comes after its own, for as many rounds as it
// has jobs. Asked with j = 2, 3, … in turn, in counts them.
type lateKeys struct {
	keys   []lateKey // by when they ask; those joined are cut off
	active int64     // joined, with jobs left in round j
	ends   []int64   // ends[i]: joined keys whose last round is j+i
	j      int64     // the last round asked (0 before any)
	// notified is the asking key's (keyState.notified)
	notified uint64
}

// asksFirst reports whether a key asking at a, whose last job the watch
// reported was an, takes a slot under the cap before one asking at b
// after bn: on a tie, the key whose jobs came first, as the scheduler's
// heap orders them (keyHeap.Less).
func asksFirst(a time.Time, an uint64, b time.Time, bn uint64) bool {
	return a.Before(b) || a.Equal(b) && an < bn
}

type lateKey struct {
	at       time.Time
	notified uint64
	depth    int64
}

func (l *lateKeys) add(at time.Time, notified uint64, depth int64) {
	l.keys = append(l.keys, lateKey{at, notified, depth})
}

// sort orders the keys by when they ask, once all are added; the asking
// key's notified breaks a tie with its own asks.
func (l *lateKeys) sort(notified uint64) {
	slices.SortFunc(l.keys, func(a, b lateKey) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.notified, b.notified)
	})
	l.notified = notified
}

// in counts the late keys that take a slot between the key's (j−1)-th
// and j-th attempts, the key asking for its j-th at ask.
func (l *lateKeys) in(j int64, ask time.Time) int64 {
	for ; l.j < j; l.j++ { // the rounds before j end
		if len(l.ends) > 0 {
			l.active -= l.ends[0]
			l.ends = l.ends[1:]
		}
	}
	for len(l.keys) > 0 && asksFirst(l.keys[0].at, l.keys[0].notified, ask, l.notified) {
		x := l.keys[0]
		l.keys = l.keys[1:]
		l.active++
		for int64(len(l.ends)) < x.depth {
			l.ends = append(l.ends, 0)
		}
		l.ends[x.depth-1]++ // its last round is j+depth−1; ends[0] is round j's
	}
	return l.active
}

// settled reports whether no late key joins the rounds or leaves them
// after round j: every round from j on counts the other keys alike.
func (l *lateKeys) settled(j int64) bool {
	return len(l.keys) == 0 && int64(len(l.ends)) <= max(j-l.j, 0)
}
