package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Clock is where HoldLease reads the time and waits. The deadline it
// reports is a time of this clock, compared by the drainers against their
// own: with the default clock both are time.Now, whose monotonic reading a
// time.Time keeps through Add, so that a step of the wall clock changes no
// holding. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// realClock is the time package's clock: the default Clock.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// HoldLease keeps trying to hold the drain lease of policy name until ctx
// ends. It calls held(true, until) when this shaper takes the lease and
// after every renewal, until being the new end of the holding on the
// Cluster's clock (Config.Clock): deliveries may start only before it
// (drain.Drainer.HoldUntil). It calls held(false, zero time) when this
// shaper no longer holds it: another shaper took it, or ctx ended. While
// renewals fail, held is not called: the holding goes on, bounded by the
// last until, and resumes when a renewal gets through. On a graceful stop
// it calls held(false) before deleting the entry, which hands the lease
// over at the next look.
// first is called once the first attempt is over, so that a lone shaper
// drains from the moment it is ready.
func (c *Cluster) HoldLease(ctx context.Context, name string, held func(holding bool, until time.Time), first func()) {
	c.holdLease(ctx, name, leaseLog(name, 0, 1), false, held, first)
}

// holdLease is HoldLease, its log lines naming the lease by attrs
// (leaseLog); an eager standby looks at the entry every LeaseTTL/30 even
// while its holder renews it.
func (c *Cluster) holdLease(ctx context.Context, name string, attrs []any, eager bool, held func(holding bool, until time.Time), first func()) {
	m := newLeaseMachine(c.cfg.LeaseTTL, c.cfg.Instance, nuid.Next())
	m.eager = eager
	clock := c.cfg.Clock
	var (
		holding bool
		until   time.Time
		failing error // what the renewals started failing with, while they fail
		lapsed  bool  // the holding's end passed while they failed: said once
	)
	report := func(a leaseAction) {
		c.logLease(attrs, a, m)
		switch a.event {
		case evFailing:
			failing, lapsed = a.err, false
		case evRecovered, evTaken, evLost:
			failing = nil
		}
		if m.held() != holding || !m.Deadline().Equal(until) {
			holding, until = m.held(), m.Deadline()
			held(holding, until)
		}
		if failing != nil && holding && !lapsed && clock.Now().After(until) {
			// The drain stops here, while the lease is still this
			// shaper's: say so, or the last word is "still holding it".
			lapsed = true
			c.log.Warn("drain lease: not renewed by its end: delivering nothing until a renewal is stored", append(attrs, "since", until.Format(time.RFC3339Nano), "err", failing)...)
		}
	}
	a := m.tick(clock.Now())
	for {
		// A call in flight when ctx ends still completes (each is bounded
		// by the request timeout), and no new one starts: a renewal cut
		// off might have been stored, and the release's delete, made with
		// the revision before it, would then leave the entry to expire —
		// the next holder of a partition handed over would wait a TTL.
		for a.call.op != opNone && ctx.Err() == nil {
			report(a)
			r := c.leaseCall(context.WithoutCancel(ctx), name, a.call, m.t.request)
			a = m.observe(clock.Now(), r)
		}
		report(a)
		if first != nil {
			first()
			first = nil
		}
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-clock.After(a.wake.Sub(clock.Now())):
			}
		}
		// Ended, the lease is released, never ticked: the loop above
		// leaves a call in flight once ctx ends, and a select with both
		// ctx and the timer ready may pick either (tick would panic).
		if ctx.Err() != nil {
			a = m.release(clock.Now())
			report(a)
			if a.call.op == opDelete {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				c.leaseCall(dctx, name, a.call, time.Second)
				cancel()
			}
			return
		}
		a = m.tick(clock.Now())
	}
}

// leaseCall makes call on the entry of lease name, bounded by d.
func (c *Cluster) leaseCall(ctx context.Context, name string, call kvCall, d time.Duration) kvResult {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		rev uint64
		err error
		e   jetstream.KeyValueEntry
	)
	switch call.op {
	case opCreate:
		rev, err = c.leases.Create(ctx, name, call.value)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return kvResult{outcome: outExists, err: err}
		}
	case opGet:
		e, err = c.leases.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return kvResult{outcome: outNotFound, err: err}
		}
		if err == nil {
			return kvResult{outcome: outOK, rev: e.Revision(), value: e.Value()}
		}
	case opUpdate:
		rev, err = c.leases.Update(ctx, name, call.value, call.rev)
	case opDelete:
		err = c.leases.Delete(ctx, name, jetstream.LastRevision(call.rev))
	}
	switch {
	case err == nil:
		return kvResult{outcome: outOK, rev: rev}
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
		return kvResult{outcome: outMismatch, err: err}
	}
	return kvResult{outcome: outFailed, err: err}
}

// logLease says what a step of the machine of the lease named by at
// (leaseLog) changed.
func (c *Cluster) logLease(at []any, a leaseAction, m *leaseMachine) {
	switch a.event {
	case evTaken:
		c.log.Info("draining policy", append(at, "instance", c.cfg.Instance)...)
	case evLost:
		if a.why == "released" {
			c.log.Info("drain lease released", append(at, "instance", c.cfg.Instance)...)
			return
		}
		c.log.Warn("stopped draining policy: "+a.why, append(at, "instance", c.cfg.Instance)...)
	case evFailing:
		c.log.Warn("drain lease: renewal failing; still holding it, delivering until its end, retrying",
			append(at, "until", m.Deadline().Format(time.RFC3339Nano), "err", a.err)...)
	case evRecovered:
		c.log.Info("drain lease renewed again", append(at, "after", m.sent.Sub(a.since).Round(time.Millisecond))...)
	}
}

// leaseLog is the log attributes naming the lease of partition i of n of
// policy, as the drain's own lines name it: the policy, and the partition
// when the policy has several. (Appending to it copies: a literal's
// capacity is its length.)
func leaseLog(policy string, i, n int) []any {
	if n <= 1 {
		return []any{"policy", policy}
	}
	return []any{"policy", policy, "partition", i}
}
