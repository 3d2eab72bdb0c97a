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
	if n.Seq > d.seen {
		d.seen = n.Seq
		if d.seenMore != nil {
			close(d.seenMore)
			d.seenMore = nil
		}
	}
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
		k.fetch, k.fetchAt = true, now
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
func (d *Drainer) resync(ctx context.Context) {
	// Note what was reported before asking: jobs reported later are not
	// in the answer's counts.
	d.mu.Lock()
	seen := make(map[string]uint64, len(d.keys))
	for token, k := range d.keys {
		seen[token] = k.notified
	}
	d.mu.Unlock()
	depths, err := d.q.TokenDepths(ctx)
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.active {
		return
	}
	d.queued = 0
	for token, k := range d.keys {
		highest, ok := seen[token]
		if !ok {
			d.queued += k.depth // made after the snapshot: its count is its own
			continue
		}
		k.resync(depths[token], highest)
		d.tally(k)
		d.queued += k.depth
		if k.depth == 0 && !k.busy && k.head.msg == nil && len(k.aside) == 0 {
			d.heap.drop(k)
			d.forget(k)
		}
	}
}
