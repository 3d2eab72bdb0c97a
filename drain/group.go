package drain

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"time"
)

// MaxPartitions bounds the partitions of a Group.
const MaxPartitions = 256

// Group drains one queue in partitions: each key belongs to one partition
// (PartitionOf its token), and each partition has a Drainer of its own,
// made active or passive on its own (SetActive), so that the partitions
// of a policy can be drained by different shapers, each holding the
// leases of its partitions. One Drainer per partition owns every answer
// about its keys (Key, StartIn, Stored): the answers and the deliveries
// come from the same schedule, as with one Drainer.
//
// A policy's total cap is split into equal shares: each partition paces
// at Total × n (its interval), so that the partitions together never
// exceed the cap, and a partition's schedule, its answers included, needs
// nothing of the others. The price is that a partition with few keys
// waiting leaves its share unused; see docs/scaling.md. So is a bound on
// the deliveries awaiting their receipt (Concurrency.Total): each
// partition takes ⌈Total/n⌉ of them, at least one, so that together they
// may exceed Total by less than n.
//
// With one partition a Group is its Drainer, on the queue as it is. With
// more, the partitions share one watch of the queue (each is told of its
// own keys' jobs only) and one count of the queue's depths.
type Group struct {
	parts []*Drainer
	hub   *hub // nil with one partition
	n     int
}

// PartitionOf returns the partition, of n, of the key whose subject token
// is token: FNV-1a of the token, modulo n. It never changes for a token
// and n, so every shaper agrees on it.
func PartitionOf(token string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(token))
	return int(h.Sum32() % uint32(n))
}

// NewGroup returns a Group of n partitions (1 ≤ n ≤ MaxPartitions) over
// q, delivering to sink at pace. cfg applies to every partition's
// Drainer, Workers included: each partition has as many, since a shaper
// may drain any number of them, and a partition just taken over reads
// every key's head at once.
func NewGroup(q Queue, n int, sink Sink, pace Pace, cfg Config) *Group {
	n = min(max(n, 1), MaxPartitions)
	g := &Group{n: n}
	if n == 1 {
		g.parts = []*Drainer{New(q, sink, pace, cfg)}
		return g
	}
	g.hub = newHub(q, n)
	pace = share(pace, n)
	if cfg.WatchedBytes == 0 {
		cfg.WatchedBytes = DefaultWatchedBytes
	}
	if cfg.WatchedBytes > 0 {
		cfg.WatchedBytes = max(cfg.WatchedBytes/n, 1) // the partitions share it
	}
	for i := range n {
		pcfg := cfg
		if cfg.Logger != nil {
			pcfg.Logger = cfg.Logger.With("partition", i)
		}
		g.parts = append(g.parts, New(g.hub.view(i), sink, pace, pcfg))
	}
	return g
}

// share returns the pace of one of n partitions: the total cap's
// interval n times as long, with an adaptive total (AdaptPolicy) its
// floor an n-th, each partition adapting its share on its own, and an n-th
// of the deliveries the policy may have awaiting their receipt (rounded up,
// at least one).
func share(p Pace, n int) Pace {
	if p.Total > 0 {
		p.Total *= time.Duration(n)
	}
	if p.Adapt.Scope == AdaptPolicy {
		p.Adapt.Floor /= float64(n)
	}
	p.Concurrency = p.Concurrency.share(n)
	return p
}

// Partitions returns the number of partitions.
func (g *Group) Partitions() int { return g.n }

// Part returns the Drainer of partition i.
func (g *Group) Part(i int) *Drainer { return g.parts[i] }

// For returns the Drainer of the partition of the key with token token.
func (g *Group) For(token string) *Drainer { return g.parts[PartitionOf(token, g.n)] }

// Key returns the status of the key with token token (Drainer.Key).
func (g *Group) Key(token string, now time.Time) KeyStatus { return g.For(token).Key(token, now) }

// StartIn returns when the key's n-th fresh job would start
// (Drainer.StartIn).
func (g *Group) StartIn(token string, n int64, now time.Time) time.Duration {
	return g.For(token).StartIn(token, n, now)
}

// Stored answers for a job just stored (Drainer.Stored), waiting at most
// wait for the job to be reported to its partition (AwaitSeen).
func (g *Group) Stored(token string, seq uint64, now time.Time, wait time.Duration) (KeyStatus, time.Duration) {
	d := g.For(token)
	return storedSeen(func() (KeyStatus, time.Duration) { return d.stored(token, seq, now) }, g.AwaitSeen, seq, wait)
}

// AwaitSeen waits until the watch of the queue has reported the job at
// seq to its partition (Drainer.AwaitSeen).
func (g *Group) AwaitSeen(ctx context.Context, seq uint64) bool {
	if g.hub == nil {
		return g.parts[0].AwaitSeen(ctx, seq)
	}
	return g.hub.awaitSeen(ctx, seq)
}

// Active reports whether any partition delivers.
func (g *Group) Active() bool {
	for _, d := range g.parts {
		if d.Active() {
			return true
		}
	}
	return false
}

// ActiveParts returns the partitions that deliver, in order.
func (g *Group) ActiveParts() []int {
	var on []int
	for i, d := range g.parts {
		if d.Active() {
			on = append(on, i)
		}
	}
	return on
}

// SetActive starts (true) or stops (false) the deliveries of partition i
// (Drainer.SetActive).
func (g *Group) SetActive(i int, on bool) { g.parts[i].SetActive(on) }

// SetAllActive starts or stops the deliveries of every partition.
func (g *Group) SetAllActive(on bool) {
	for _, d := range g.parts {
		d.SetActive(on)
	}
}

// Recount sets the depths of partition i's keys from the queue's counts,
// read now. A passive partition sees every job stored, through the watch,
// but the removals of the shaper delivering it only when it recounts
// (every resyncPeriod, from a count at most depthsFresh old): taken over
// with those, it would count jobs already gone as waiting, and promise
// its keys' next jobs that many slots late. Call it on a partition taken
// over, before SetActive(i, true); it does nothing to an active one.
func (g *Group) Recount(ctx context.Context, i int) {
	if g.hub != nil {
		g.hub.recountFrom(i, time.Now())
	}
	g.parts[i].resync(ctx)
}

// HoldUntil bounds when partition i's deliveries may start: the end of its
// lease (Drainer.HoldUntil).
func (g *Group) HoldUntil(i int, until time.Time) { g.parts[i].HoldUntil(until) }

// SetPace applies a changed pace to every partition, each with its share
// of the total cap (Drainer.SetPace).
func (g *Group) SetPace(p Pace) {
	p = share(p, g.n)
	for _, d := range g.parts {
		d.SetPace(p)
	}
}

// Start begins draining every partition in the background
// (Drainer.Start).
func (g *Group) Start(ctx context.Context) {
	for _, d := range g.parts {
		d.Start(ctx)
	}
}

// Drain finishes every partition's deliveries in flight and frees the
// slots of delivered jobs (Drainer.Drain).
func (g *Group) Drain(ctx context.Context) error {
	errs := make([]error, g.n)
	var wg sync.WaitGroup
	for i, d := range g.parts {
		wg.Go(func() { errs[i] = d.Drain(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop ends every partition at once (Drainer.Stop).
func (g *Group) Stop() {
	var wg sync.WaitGroup
	for _, d := range g.parts {
		wg.Go(d.Stop)
	}
	wg.Wait()
}

// Stats returns the figures of all partitions added up.
func (g *Group) Stats() Stats {
	var st Stats
	for _, d := range g.parts {
		s := d.Stats()
		st.Keys += s.Keys
		st.Queued += s.Queued
		st.QueuedDraining += s.QueuedDraining
		st.Delivered += s.Delivered
		st.Failed += s.Failed
		st.Dead += s.Dead
		st.InFlight += s.InFlight
		st.Retries += s.Retries
		st.RetriesDeferred += s.RetriesDeferred
		st.SteppedAside += s.SteppedAside
	}
	return st
}

// Advance drives every partition on a virtual clock (Drainer.Advance) and
// returns when the first of them next needs attention.
func (g *Group) Advance(ctx context.Context, now time.Time) (next time.Time, ok bool) {
	for _, d := range g.parts {
		d.drive() // every partition watches before any delivers
	}
	for _, d := range g.parts {
		if t, dok := d.Advance(ctx, now); dok && (!ok || t.Before(next)) {
			next, ok = t, true
		}
	}
	return next, ok
}
