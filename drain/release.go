package drain

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Release hands the Drainer's keys over to another drainer: it stops
// deliveries (SetActive(false)), waits until the steps in flight have
// ended, and frees the slots of the jobs delivered, which a drainer keeps
// for a while after each delivery (Config.MaxSlotHold): the next drainer
// of the keys then finds only jobs not yet delivered. Call it before
// giving the drain lease up, so that a graceful hand-over delivers no job
// twice. It returns early with ctx's error, leaving those slots to the
// next drainer (which delivers their jobs again, as after a crash).
func (d *Drainer) Release(ctx context.Context) error {
	d.SetActive(false)
	if err := d.waitIdle(ctx); err != nil {
		return err
	}
	return d.freeDelivered(ctx)
}

// waitIdle waits until no step is in flight, or ctx ends. Callers make
// sure none starts meanwhile (Drain, an inactive Drainer).
func (d *Drainer) waitIdle(ctx context.Context) error {
	d.mu.Lock()
	if d.inflight == 0 {
		d.mu.Unlock()
		return nil
	}
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	idle := d.idle
	d.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// freeDelivered removes the jobs delivered whose slots are still held,
// and records their slots freed, unless their key was taken up again
// meanwhile (an activation: its own steps free them).
func (d *Drainer) freeDelivered(ctx context.Context) error {
	d.mu.Lock()
	var keys []*keyState
	var seqs []uint64
	for _, k := range d.keys {
		if len(k.pend) > 0 && !k.busy {
			keys = append(keys, k)
			seqs = append(seqs, k.pend...)
		}
	}
	d.mu.Unlock()
	if err := removeAll(ctx, d.q, seqs); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	for _, k := range keys {
		if k.busy || d.active && !d.draining {
			continue
		}
		if n := k.freed(len(k.pend)); n > 0 {
			d.queued -= int64(n)
			k.freedAt = instantOf(now)
		}
		d.tally(k)
	}
	return nil
}

// releaseRemovals bounds the removals in flight at once when a Drainer
// releases its keys: one after another, a hand-over of a thousand keys
// would wait a thousand round trips.
const releaseRemovals = 32

// removeAll removes the jobs at seqs from q, releaseRemovals at a time.
func removeAll(ctx context.Context, q Queue, seqs []uint64) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan uint64)
	for range min(releaseRemovals, len(seqs)) {
		wg.Go(func() {
			for seq := range next {
				if err := q.Remove(ctx, seq); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, seq := range seqs {
		next <- seq
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// LastStarts returns, by key token, when each key's last attempt started
// — or, when its next slot is still ahead (a slot reserved under the total
// cap, a pause the downstream asked for), one outflow interval before that
// slot — for the keys whose time so found is after since: what the next
// drainer of the keys needs to keep their pace, and their places in the
// total cap's rounds, across a hand-over (KeepPace). Without the slots
// ahead, a key the cap had given a slot a round away would start at once
// with the next drainer, a round before the time its producers were told.
func (d *Drainer) LastStarts(since time.Time) map[string]time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	out := map[string]time.Time{}
	for token, k := range d.keys {
		at := k.lastStart.time()
		if k.next.time().After(now) {
			at = maxTime(at, k.next.time().Add(-d.pace.Interval))
		}
		if at.After(since) {
			out[token] = at
		}
	}
	return out
}

// KeepPace makes the next attempt of each key in last (by key token) no
// sooner than one outflow interval after the time given: when another
// drainer last started one of its jobs (LastStarts), before it handed the
// keys over. Call it before SetActive(true).
func (d *Drainer) KeepPace(last map[string]time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for token, at := range last {
		k := d.keys[token]
		if k == nil || !at.After(k.lastStart.time()) {
			continue
		}
		k.last, k.lastStart = instantOf(at), instantOf(at)
		k.next = instantOf(maxTime(k.next.time(), at.Add(d.interval(k))))
	}
}

// CapOrder is where a drainer's keys stood under the total cap: the slot
// each key had reserved (by key token), and the cap's next slot free after
// every slot given.
type CapOrder struct {
	Slots map[string]time.Time
	Next  time.Time
}

// CapOrder returns where the keys stand under the total cap (nothing
// without a cap), or stood when the Drainer last became inactive: with
// LastStarts, what the next drainer of the keys needs to keep the cap's
// order across a hand-over (KeepCapOrder). LastStarts alone keeps each
// key's own slot, not the cap's: a key with no slot reserved yet would
// take the next drainer's first cap slot, which this drainer had promised
// another key, or which follows the last one given by less than the cap's
// interval.
func (d *Drainer) CapOrder() CapOrder {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.total() <= 0 {
		return CapOrder{}
	}
	o := CapOrder{Next: d.totalNext}
	for token, k := range d.keys {
		if k.reserved {
			if o.Slots == nil {
				o.Slots = map[string]time.Time{}
			}
			o.Slots[token] = k.next.time()
		}
	}
	return o
}

// KeepCapOrder makes the Drainer, when it next becomes active, take the
// keys' places under the total cap that another drainer gave them
// (CapOrder): each key's reserved slot, in their order, at its time when
// that is still ahead and free, else at the cap's next slot, so that
// slots which passed during the hand-over follow each other by the cap's
// interval from then on; and the keys that had none take theirs after
// them, no sooner than the other drainer's next slot. Call it after
// KeepPace, before SetActive(true).
func (d *Drainer) KeepCapOrder(o CapOrder) {
	d.mu.Lock()
	d.keep = o
	d.mu.Unlock()
}

// keepCapOrder takes the places KeepCapOrder was given, skipping the keys
// with no job left or in a step. d.mu must be held.
func (d *Drainer) keepCapOrder(now time.Time) {
	o := d.keep
	d.keep = CapOrder{}
	total := d.total()
	if total <= 0 {
		return
	}
	type held struct {
		k  *keyState
		at time.Time
	}
	order := make([]held, 0, len(o.Slots))
	for token, at := range o.Slots {
		if k := d.keys[token]; k != nil && k.depth > 0 && !k.busy {
			order = append(order, held{k, at})
		}
	}
	slices.SortFunc(order, func(a, b held) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.k.token, b.k.token))
	})
	next := maxTime(d.totalNext, now)
	for _, h := range order {
		d.reserve(h.k, maxTime(maxTime(h.at, next), h.k.next.time()), total)
		next = d.totalNext
		d.place(h.k, now)
	}
	d.totalNext = maxTime(d.totalNext, o.Next) // after the slots given, reserved or not
}
