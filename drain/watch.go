package drain

import (
	"context"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// What the watch of the queue tells a Drainer: which keys have jobs, and,
// while it is passive, how many are left (resync).

// newKey adds the state of a key first seen, reusing one forgotten before.
// d.mu must be held.
func (d *Drainer) newKey(token, name string) *keyState {
	var k *keyState
	if n := len(d.spare); n > 0 {
		k, d.spare = d.spare[n-1], d.spare[:n-1]
		k.reuse(token, name)
	} else {
		k = newKeyState(token, name)
	}
	k.attach(&d.counts)
	d.keys[token] = k
	return k
}

// forget drops k, out of the heap and not busy, keeping it for reuse.
// d.mu must be held.
func (d *Drainer) forget(k *keyState) {
	d.waiting.set(k.tallied, 0)
	k.tallied = 0
	k.detach()
	delete(d.keys, k.token)
	if len(d.spare) < maxSpareKeys {
		d.spare = append(d.spare, k)
	}
}

// maxSpareKeys bounds the states of forgotten keys kept for reuse: keys
// that come and go (a job now and then each) cost no allocation.
const maxSpareKeys = 1024

// notice records a job Watch saw stored, and wakes an idle key.
func (d *Drainer) notice(n queue.Notice) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen.advance(n.Seq)
	k := d.keys[n.Token]
	if k == nil {
		name, err := n.Key()
		if err != nil {
			if d.cfg.DeadLetter == nil {
				return // not a job Admit stored, and nowhere to put it: left stored
			}
			// Not a job Admit stored: its token is drained like a key, so
			// that each of its jobs, read undecodable, is dead-lettered
			// (applyRead) instead of sitting in the queue for ever.
			name = n.Token
		}
		// Watch reports every job of the queue, in order, from the first:
		// a key's state made at its first notice knows all its jobs.
		k = d.newKey(n.Token, name)
	}
	news, counted := k.notice(n.Seq)
	if !news {
		return
	}
	d.keepWatched(k, n)
	if counted {
		d.queued++
		d.tally(k)
	}
	if d.debug {
		d.log.Debug("drain: stored", "key", k.name, "seq", n.Seq, "depth", k.depth, "busy", k.busy,
			"held", seqOf(k.head.msg), "fetch", k.fetch, "active", d.active)
	}
	switch {
	case k.busy:
		k.wake = true
	case k.head.msg == nil && !k.fetch && d.active:
		now := d.clock.Now()
		k.fetch, k.fetchAt = true, instantOf(now)
		d.place(k, now)
		d.wakeScheduler()
	}
}

// resyncPeriod is how often a passive Drainer reads its keys' depths from
// the queue: it sees every job stored, through Watch, but not the jobs the
// active drainer (on another shaper) removes.
const resyncPeriod = 2 * time.Second

func (d *Drainer) resyncWhilePassive(ctx context.Context) {
	t := d.clock.NewTimer(resyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		t.Reset(resyncPeriod)
		if !d.Active() {
			d.resync(ctx)
		}
	}
}

// resync sets a passive Drainer's depths from the queue's counts.
//
// The count holds every job stored up to the sequence it reaches (upTo),
// and the jobs Watch reports above it come on top. So that no job is
// counted twice, or not at all, the count is applied once Watch has
// reported every job up to upTo (at most resyncWait later): a job stored
// after a key's last notice and before the count, reported before it is
// applied, is in both (a key taken over while its producers submit would
// otherwise count a job that does not exist, and promise each of its jobs
// a round late, for good: TestResyncCountsAJobStoredMeanwhileOnce).
func (d *Drainer) resync(ctx context.Context) {
	depths, upTo, err := d.q.TokenDepths(ctx)
	if err != nil {
		return
	}
	await := d.AwaitSeen
	if v, ok := d.q.(interface {
		awaitReported(context.Context, uint64) bool
	}); ok {
		await = v.awaitReported // a partition: Watch reports every partition's jobs
	}
	wait, cancel := context.WithTimeout(ctx, resyncWait)
	await(wait, upTo) // past resyncWait, a job up to upTo reported later is counted twice: see lost
	cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.active {
		return
	}
	d.queued = 0
	for token, k := range d.keys {
		k.resync(depths[token], upTo)
		d.tally(k)
		d.queued += k.depth
		if k.depth == 0 && !k.busy && k.head.msg == nil && len(k.aside) == 0 {
			d.heap.drop(k)
			d.forget(k)
		}
	}
}

// resyncWait bounds how long resync waits for Watch to report the jobs its
// count holds. Watch is a moment behind the store (a millisecond or so); it
// may not report the last job counted at all, when another drainer removed
// it first: then a partition taken over starts this much later.
const resyncWait = 100 * time.Millisecond
