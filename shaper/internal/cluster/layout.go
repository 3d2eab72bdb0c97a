package cluster

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A policy's layout is the number of partitions it is drained in: shapers
// whose files say another number must not drain beside each other (their
// partitions split the keys otherwise), so the layout in use is kept in an
// entry of the leases bucket.

// leaveLayout deletes the layout entry of policy name, drained in n
// partitions, when this shaper is the last one alive (as the members read
// last said): the graceful stop of the last shaper. A shaper then started
// with another number of partitions (the documented way to change it)
// drains at once, instead of standing by for a lease TTL with an error
// about other shapers that are not there.
func (c *Cluster) leaveLayout(ctx context.Context, name string, n int) {
	if c.LayoutInUse(name) != 0 || c.shapers.Load() > 1 {
		return // the entry is another layout's, or others keep it
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	e, err := c.leases.Get(ctx, layoutKey(name))
	if err == nil && string(e.Value()) == strconv.Itoa(n) {
		c.leases.Delete(ctx, layoutKey(name), jetstream.LastRevision(e.Revision()))
	}
}

// LayoutInUse returns the number of partitions other shapers drain policy
// name in, when it is not this shaper's (which then stands by), as its
// last look at the layout entry said; 0 when they agree.
func (c *Cluster) LayoutInUse(name string) int {
	if c == nil {
		return 0
	}
	if v, ok := c.inUse.Load(name); ok {
		return v.(int)
	}
	return 0
}

// layoutKey names the entry that says in how many partitions a policy is
// drained: kept by the holder of its partition 0, it expires with the
// leases bucket's TTL once no shaper drains the policy that way.
func layoutKey(policy string) string { return "layout." + policy }

// checkLayout returns the number of partitions other shapers drain policy
// name in, when it is not n, and 0 when this shaper may drain it in n:
// the layout entry, which shapers draining a policy keep, says n or
// nothing, and, for n > 1, no other shaper holds the policy's one lease
// (shapers of a release before partitions, draining it whole, write no
// layout entry). It creates the entry when there is none (and, when
// another shaper created it first, reads theirs), and renews it when keep
// (this shaper holds partition 0). A failed read says 0: the leases
// themselves still keep a partition with one shaper.
func (c *Cluster) checkLayout(ctx context.Context, name string, n int, keep bool) int {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/6)
	defer cancel()
	value := []byte(strconv.Itoa(n))
	e, err := c.leases.Get(ctx, layoutKey(name))
	switch {
	case err == nil:
		if other := otherLayout(e, n); other != 0 {
			return other
		}
		if keep {
			c.leases.Put(ctx, layoutKey(name), value)
		}
		return 0
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return 0
	}
	if n > 1 {
		if e, err := c.leases.Get(ctx, name); err == nil && parseHolder(e.Value()).Instance != c.cfg.Instance {
			return 1 // a shaper (maybe of an earlier release) drains the policy whole
		}
	}
	if _, err := c.leases.Create(ctx, layoutKey(name), value); errors.Is(err, jetstream.ErrKeyExists) {
		// Another shaper stored its layout since the read: read it now,
		// before taking a partition, since another number of partitions
		// splits the keys otherwise.
		if e, err := c.leases.Get(ctx, layoutKey(name)); err == nil {
			return otherLayout(e, n)
		}
	}
	return 0
}

// otherLayout returns the number of partitions layout entry e says when it
// is not n, and 0 when it says n (or nothing readable).
func otherLayout(e jetstream.KeyValueEntry, n int) int {
	if other, _ := strconv.Atoi(string(e.Value())); other != n && other > 0 {
		return other
	}
	return 0
}
