package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A drain lease is an entry, named after its policy, in the leases bucket,
// whose value is the holder's instance id and which expires LeaseTTL after
// it was last written (the bucket's TTL).
//
// The holder rewrites it every LeaseTTL/3 with a compare-and-set on its
// revision. A renewal that fails for a reason that may pass (a JetStream
// election, a reconnection) is retried every LeaseTTL/12, and the holder
// keeps draining: it is still the holder while its entry has not expired,
// and after that as long as nobody else took it and no other shaper is
// alive to take it. Only another shaper's entry ends a holding at once.
//
// The others look at the entry every LeaseTTL/3 and, once its revision
// stops changing, every LeaseTTL/30, creating it the moment it expires.
// One whose revision they have seen unchanged for a whole LeaseTTL has
// expired even if the server has not removed it yet: they take it over
// with a compare-and-set on that revision. So the lease changes hands
// LeaseTTL after the holder's last renewal, whatever it died of.

// leaseTimings are the lease's periods for a lease lifetime.
type leaseTimings struct {
	renew   time.Duration // the holder's renewals; a standby's looks
	retry   time.Duration // after a failure
	watch   time.Duration // a standby's looks at an entry that stopped changing
	request time.Duration // bound of one request
}

func timingsFor(ttl time.Duration) leaseTimings {
	return leaseTimings{renew: ttl / 3, retry: ttl / 12, watch: ttl / 30, request: ttl / 6}
}

// lease is this shaper's view of one policy's drain lease. It is used by
// HoldLease's goroutine only.
type lease struct {
	c         *Cluster
	name      string
	held      func(bool)
	t         leaseTimings
	holding   bool
	rev       uint64    // our entry's revision, while holding
	renewedAt time.Time // when the write of rev was sent
	failing   bool      // renewals fail (said once in the log)
	// another shaper's entry, while not holding: its revision, when we
	// first saw it, and whether it changed at the last look
	otherRev   uint64
	otherSince time.Time
	otherMoved bool
}

// errHeld is returned by take when another shaper holds the lease.
var errHeld = errors.New("held by another shaper")

// HoldLease keeps trying to hold the drain lease of policy name until ctx
// ends, calling held(true) when this shaper takes it and held(false) when
// it stops draining; on a graceful stop it hands the lease over at once.
// first is called once the first attempt is over, so that a lone shaper
// drains from the moment it is ready.
func (c *Cluster) HoldLease(ctx context.Context, name string, held func(bool), first func()) {
	l := &lease{c: c, name: name, held: held, t: timingsFor(c.cfg.LeaseTTL)}
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		next := l.step(ctx)
		if first != nil {
			first()
			first = nil
		}
		wait.Reset(next)
		select {
		case <-ctx.Done():
			if l.holding {
				dctx, cancel := context.WithTimeout(context.Background(), time.Second)
				c.leases.Delete(dctx, name, jetstream.LastRevision(l.rev))
				cancel()
			}
			return
		case <-wait.C:
		}
	}
}

// step makes one attempt to renew or take the lease and returns when to
// make the next.
func (l *lease) step(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, l.t.request)
	defer cancel()
	sent := time.Now()
	if l.holding {
		rev, err := l.c.leases.Update(ctx, l.name, []byte(l.c.cfg.Instance), l.rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			// Our entry changed or expired; it may still be ours (a
			// renewal that timed out but was stored).
			rev, err = l.take(ctx)
		}
		switch {
		case err == nil:
			l.renewed(rev, sent)
			return l.t.renew
		case errors.Is(err, errHeld):
			l.set(false, "lease taken over by another shaper", err)
			return l.t.renew
		}
		if !l.failing {
			l.failing = true
			l.c.log.Warn("drain lease: renewal failing; still holding it, retrying", "policy", l.name, "err", err)
		}
		if time.Since(l.renewedAt) >= l.c.cfg.LeaseTTL-l.t.retry && l.c.Shapers() > 1 {
			l.set(false, "drain lease not renewed within its lifetime", err)
		}
		return l.t.retry
	}
	rev, err := l.take(ctx)
	switch {
	case err == nil:
		l.renewed(rev, sent)
		l.set(true, "", nil)
		return l.t.renew
	case errors.Is(err, errHeld) && l.otherMoved:
		return l.t.renew // its holder renews it
	case errors.Is(err, errHeld):
		return l.t.watch // its holder may be gone: take it once it expires
	default:
		return l.t.retry
	}
}

// renewed records that the write sent at sent stored our entry at rev.
func (l *lease) renewed(rev uint64, sent time.Time) {
	if l.failing {
		l.failing = false
		l.c.log.Info("drain lease renewed again", "policy", l.name, "after", time.Since(l.renewedAt).Round(time.Millisecond))
	}
	l.rev, l.renewedAt = rev, sent
}

// take creates the lease, takes back one this instance holds (after a
// restart, or a renewal stored but not answered), or takes over one whose
// holder has not renewed it for a whole lease lifetime. It returns
// errHeld when another shaper holds it.
func (l *lease) take(ctx context.Context) (uint64, error) {
	me := []byte(l.c.cfg.Instance)
	rev, err := l.c.leases.Create(ctx, l.name, me)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return rev, err
	}
	e, err := l.c.leases.Get(ctx, l.name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return l.c.leases.Create(ctx, l.name, me) // expired in between
	}
	if err != nil {
		return 0, err
	}
	if string(e.Value()) == l.c.cfg.Instance {
		return l.c.leases.Update(ctx, l.name, me, e.Revision())
	}
	now := time.Now()
	l.otherMoved = e.Revision() != l.otherRev
	if l.otherMoved {
		l.otherRev, l.otherSince = e.Revision(), now
		return 0, errHeld
	}
	if now.Sub(l.otherSince) < l.c.cfg.LeaseTTL {
		return 0, errHeld
	}
	rev, err = l.c.leases.Update(ctx, l.name, me, e.Revision())
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, errHeld
	}
	return rev, err
}

// set starts or stops the drain, saying why it stops.
func (l *lease) set(on bool, why string, err error) {
	if l.holding == on {
		return
	}
	l.holding = on
	l.held(on)
	if on {
		l.c.log.Info("draining policy", "policy", l.name, "instance", l.c.cfg.Instance)
	} else {
		l.c.log.Warn("stopped draining policy: "+why, "policy", l.name, "instance", l.c.cfg.Instance, "err", err)
	}
}
