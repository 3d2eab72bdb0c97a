package queue

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Reserve keeps part of JetStream's storage for what the shapers write
// besides jobs: the drain leases, the membership, the job records, the dead
// letters. JetStream refuses every write, to any stream, once its store is
// over its limit. A store filled with jobs while no consumer took any would
// then refuse the drain lease's renewals too, and the drain, the one thing
// that frees room, would stop: a consumer subscribing later would get
// nothing. With a Reserve, Admit refuses a job (ErrStorageFull) once the
// store is within ReserveFor(limit) of its limit, so that jobs alone never
// fill it.
//
// The store's use and limit come from a sample (Run, every ReserveEvery),
// to which Admit adds what it stores until the next one. Jobs stored
// meanwhile by other shapers, or by producers of the direct lane, are
// counted at the next sample: the reserve covers them. Without a known
// limit (an external server whose account has none: its own limit is not
// visible to clients), nothing is refused. The zero value and a nil
// *Reserve refuse nothing; a Reserve is safe for concurrent use.
type Reserve struct {
	used  atomic.Int64 // at the last sample, plus what Admit stored since
	limit atomic.Int64 // the store's limit; 0: unknown
}

// ReserveEvery is how often Run samples the store's use.
const ReserveEvery = 250 * time.Millisecond

// ReserveFor returns the part of a store of limit bytes kept from jobs:
// 1/32 of it, at least 256 KiB and at most 256 MiB (and never more than
// half of it).
func ReserveFor(limit int64) int64 {
	return min(max(limit/32, 256<<10), 256<<20, limit/2)
}

// Sample sets what the store uses and its limit (0 or less: unknown).
func (r *Reserve) Sample(used, limit int64) {
	r.used.Store(used)
	r.limit.Store(max(limit, 0))
}

// Run samples the store with sample every ReserveEvery until ctx ends. A
// sample that fails keeps the last one, and what was stored since counts.
func (r *Reserve) Run(ctx context.Context, sample func(context.Context) (used, limit int64, err error)) {
	t := time.NewTicker(ReserveEvery)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, ReserveEvery)
		used, limit, err := sample(sctx)
		cancel()
		if err == nil {
			r.Sample(used, limit)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Room returns what the store uses (as last sampled, plus what was stored
// since), its limit, and whether the limit is known.
func (r *Reserve) Room() (used, limit int64, known bool) {
	if r == nil {
		return 0, 0, false
	}
	limit = r.limit.Load()
	return r.used.Load(), limit, limit > 0
}

// ErrReserve is the cause of a job refused by a Reserve (wrapped with
// ErrStorageFull).
var ErrReserve = errors.New("the store is within the room kept for the shapers' own records")

// take counts a message of n bytes about to be stored, or refuses it when
// it would enter the reserve.
func (r *Reserve) take(n int64) error {
	if r == nil {
		return nil
	}
	limit := r.limit.Load()
	if limit <= 0 {
		return nil
	}
	keep := ReserveFor(limit)
	if used := r.used.Add(n); used > limit-keep {
		r.used.Add(-n)
		return &opError{"queue: admit", ErrStorageFull, fmt.Errorf("%w: JetStream's store holds %s of %s, and its last %s are kept for the drain leases, the membership and the job records",
			ErrReserve, FormatBytes(used-n), FormatBytes(limit), FormatBytes(keep))}
	}
	return nil
}

// storedSize is about what a file store takes for m: its record's header
// and checksum, subject, headers and data.
func storedSize(m *nats.Msg) int64 {
	n := 30 + len(m.Subject) + len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// FormatBytes formats n bytes in binary units: 512 B, 4.0 MiB.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
