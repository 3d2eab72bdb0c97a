package admission

import (
	"context"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
)

// freeIn is how long until a slot of a key of p frees, from the drainer's
// view st of it, for a refusal by a store asked at asked. When the drainer
// sees fewer jobs than the queue holds (p's size, or the store's when
// smaller), either the store's refusal raced with a slot the drainer freed
// since it was asked — there is room now, so 0, not the key's next slot
// after the one just freed, which may be an hour away — or the drainer has
// not yet seen the jobs that fill the key, and the slot frees when it says
// (RoomIn: the key's next slot, and the hold after it). A refusal by a
// store asked after the drainer last freed a slot of the key is the
// second. A drainer that never freed one (a passive one, or a key new to
// it, whose RoomIn is only a guess) cannot tell: 0, and the producer asks
// again; known is false then.
//
// Jobs whose slots the drainer is freeing at this moment (Freeing) are not
// counted as staying: when the others leave room, that room is the one
// being freed, now; when they fill the key (a job took the freed slot
// already), the room comes after the key's next attempt.
func (g *Gate) freeIn(p *policies.Policy, token string, st drain.KeyStatus, asked time.Time) (d time.Duration, known bool) {
	if g.roomy(p, st) && (st.FreedAt.IsZero() || !st.FreedAt.Before(asked)) {
		return 0, !st.FreedAt.IsZero()
	}
	return g.room(p, token, st, asked), true
}

// room is how long from now until the key with token token of p has room,
// in the drainer's view st: at once when a slot it is freeing now makes
// room, else RoomIn (the room after those). A key holding more jobs than
// its queue takes (the queue made smaller than it while live) has room
// only once the jobs beyond it left too: RoomIn, and the schedule's
// spacing from the key's first attempt to the one that makes room.
func (g *Gate) room(p *policies.Policy, token string, st drain.KeyStatus, now time.Time) time.Duration {
	if st.Freeing > 0 && g.roomy(p, st) {
		return 0
	}
	if over := st.Queued - st.Freeing - g.limit(p); over > 0 {
		return st.RoomIn + max(g.drained.StartIn(token, over+1, now)-g.drained.StartIn(token, 1, now), 0)
	}
	return st.RoomIn
}

// limit is the most jobs a key of p holds: p's queue, or the store's
// limit when smaller.
func (g *Gate) limit(p *policies.Policy) int64 { return int64(min(p.Queue, g.queue.Limit())) }

// roomy reports whether the key has room in the drainer's view st once
// the slots it is freeing now are free (jobs stored but for those).
func (g *Gate) roomy(p *policies.Policy, st drain.KeyStatus) bool {
	return st.Queued-st.Freeing < g.limit(p)
}

// awaitFilling waits, when the store refused a job of a key its drainer
// sees room in, for the drainer to have seen every job stored until now
// (briefly: awaitSeen at most): it has not yet seen those that fill the
// key (a burst of the key's producers at once), and the answer would say
// the key has room now (a tour saw Retry-After 1 ms on 429s of a key
// holding 10 of 10 jobs, whose room came ~90 ms later). Only when freeIn
// cannot tell (a key whose drainer never freed a slot of it): one that did
// tells a refusal that raced with a slot freed since (room now) from jobs
// it has not seen (room at its next slot).
//
// It reports whether it waited.
func (g *Gate) awaitFilling(ctx context.Context, p *policies.Policy, token string, now time.Time) bool {
	if _, known := g.freeIn(p, token, g.drained.Key(token, now), now); known {
		return false
	}
	q, ok := g.queue.(interface {
		LastSeq(context.Context) (uint64, error)
	})
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, awaitSeen)
	defer cancel()
	last, err := q.LastSeq(ctx)
	if err != nil {
		return false
	}
	g.drained.Stored(token, last, now, awaitSeen) // answers once it saw last; the answer is not needed
	return true
}
