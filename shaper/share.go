package shaper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/limiter"
)

// When Redis is lost, a policy that fails open does not admit without limit:
// each shaper falls back to its local share of the admission limit, the
// limit divided by the number of live shapers. Shapers count each other
// through member.<id> entries in the SHAPER_LEASES bucket, renewed with the
// leases and expiring with them.

// peers counts the live shapers (at least 1).
type peers struct{ n atomic.Int64 }

func (p *peers) count() int64 { return max(p.n.Load(), 1) }

func memberKey(instance string) string {
	sum := sha256.Sum256([]byte(instance))
	return "member." + hex.EncodeToString(sum[:8])
}

// keepMembership renews this shaper's member entry and recounts the peers
// every LeaseTTL/3 until ctx ends.
func (s *Shaper) keepMembership(ctx context.Context, kv jetstream.KeyValue) {
	key := memberKey(s.cfg.InstanceID)
	tick := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseTTL/3)
		if _, err := kv.PutString(cctx, key, s.cfg.InstanceID); err == nil {
			if l, err := kv.ListKeysFiltered(cctx, "member.*"); err == nil {
				n := int64(0)
				for range l.Keys() {
					n++
				}
				if old := s.peers.n.Swap(n); old != n && old != 0 {
					s.log.Info("shapers on the cluster changed", "shapers", n)
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
			kv.Delete(dctx, key)
			dcancel()
			return
		case <-tick.C:
		}
	}
}

// localShare is an in-memory limiter allowing this shaper's share of a
// limit: Count (and Burst) divided by the number of live shapers, at least 1.
// It rebuilds itself when the number of shapers changes. Safe for concurrent use.
type localShare struct {
	alg   limiter.Algorithm
	limit limiter.Limit
	peers *peers

	mu  sync.Mutex
	n   int64
	mem *limiter.Memory
}

var _ limiter.Limiter = (*localShare)(nil)

// Allow implements limiter.Limiter.
func (l *localShare) Allow(ctx context.Context, key string) (limiter.Result, error) {
	n := l.peers.count()
	l.mu.Lock()
	if l.mem == nil || n != l.n {
		share := l.limit
		share.Count = max(share.Count/n, 1)
		if share.Burst > 0 {
			share.Burst = max(share.Burst/n, 1)
		}
		m, err := limiter.NewMemory(l.alg, share)
		if err != nil {
			l.mu.Unlock()
			return limiter.Result{}, err
		}
		l.mem, l.n = m, n
	}
	m := l.mem
	l.mu.Unlock()
	return m.Allow(ctx, key)
}
