package drain

import (
	"slices"
	"time"
)

// NextTry returns how long from now until the failed job at seq of key
// token is tried again, by the schedule the scheduler acts on (start's
// walk of the key's slots: its backoff, the key's slots, the retries due
// before it and the retry budget the fresh jobs leave it); ok is false
// when the Drainer holds no such job waiting for a retry: it is being
// attempted now, or was delivered or dead-lettered, or it belongs to a
// partition another shaper delivers.
func (d *Drainer) NextTry(token string, seq uint64, now time.Time) (in time.Duration, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.keys[token]
	if k == nil {
		return 0, false
	}
	dues := k.dueRetries()
	i := slices.IndexFunc(dues, func(t *tried) bool { return t.msg.Seq == seq })
	if i < 0 {
		return 0, false
	}
	at := d.attempt(k, max(k.waitingTurn()-int64(k.retrying()), 0), dues[i], now)
	return max(at.Sub(now), 0), true
}

// NextTry returns when the failed job at seq of key token is tried again
// (Drainer.NextTry), from its partition's drainer.
func (g *Group) NextTry(token string, seq uint64, now time.Time) (time.Duration, bool) {
	return g.For(token).NextTry(token, seq, now)
}
