package cluster

import (
	"context"
	"sync"
	"time"
)

// drainersFresh is how long Drainers answers from its last read.
const drainersFresh = time.Second

// drainersCache is Drainers' last read, per policy.
type drainersCache struct {
	mu   sync.Mutex
	read map[string]drainersRead
}

type drainersRead struct {
	at      time.Time
	holders []string
	renewed []time.Time // when each holder last wrote its entry, by the server's clock
}

// Drainers returns, for each of the n partitions of policy name, the
// instance id of the shaper holding its lease ("" when none does), as
// read from the leases bucket at most a second ago; and the holders that
// missed a renewal (a holder renews every LeaseTTL/3), each with how long
// ago its entry was last written: a holder lost (kill -9, a machine gone)
// is listed until its lease ends, a lease TTL after its last renewal, and
// this says it stopped renewing meanwhile.
func (c *Cluster) Drainers(ctx context.Context, name string, n int) (holders []string, unrenewed map[string]time.Duration) {
	r := c.readDrainers(ctx, name, n)
	now := time.Now()
	for i, who := range r.holders {
		if who == "" || r.renewed[i].IsZero() {
			continue
		}
		// Missed at the read, not now: the entry may have been renewed
		// since the read this answers from, up to drainersFresh ago.
		if r.at.Sub(r.renewed[i]) > c.cfg.LeaseTTL/3+c.cfg.LeaseTTL/12 {
			if unrenewed == nil {
				unrenewed = map[string]time.Duration{}
			}
			unrenewed[who] = max(unrenewed[who], now.Sub(r.renewed[i]))
		}
	}
	return r.holders, unrenewed
}

func (c *Cluster) readDrainers(ctx context.Context, name string, n int) drainersRead {
	c.drainers.mu.Lock()
	defer c.drainers.mu.Unlock()
	if r, ok := c.drainers.read[name]; ok && len(r.holders) == n && time.Since(r.at) < drainersFresh {
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r := drainersRead{at: time.Now(), holders: make([]string, n), renewed: make([]time.Time, n)}
	for i := range n {
		if e, err := c.leases.Get(ctx, PartitionLease(name, i, n)); err == nil {
			r.holders[i] = parseHolder(e.Value()).Instance
			r.renewed[i] = e.Created()
		}
	}
	if c.drainers.read == nil {
		c.drainers.read = map[string]drainersRead{}
	}
	c.drainers.read[name] = r
	return r
}
