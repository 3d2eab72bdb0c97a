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
// The store's use and limit come from a sample (Run, every ReserveEvery).
// To it Admit adds, until the next sample, the jobs it stored since that
// sample was asked for, and every job it is storing: taken, its store not
// answered yet, so that jobs stored at once (a burst of large ones) count
// each other. Jobs stored meanwhile by other shapers, or by producers of
// the direct lane, are counted at the next sample: the reserve covers
// them. Without a known limit (an external server whose account has none:
// its own limit is not visible to clients), nothing is refused. The zero
// value and a nil *Reserve refuse nothing; a Reserve is safe for
// concurrent use.
type Reserve struct {
	base    atomic.Int64 // the store's use at the last sample
	mark    atomic.Int64 // stored when that sample was asked for
	stored  atomic.Int64 // bytes of jobs Admit stored, ever
	pending atomic.Int64 // bytes of jobs taken, their store not answered yet
	limit   atomic.Int64 // the store's limit; 0: unknown
}

// ReserveEvery is how often Run samples the store's use.
const ReserveEvery = 250 * time.Millisecond

// ReserveFor returns the part of a store of limit bytes kept from jobs:
// 1/32 of it, at least 256 KiB and at most 256 MiB (and never more than
// half of it).
func ReserveFor(limit int64) int64 {
	return min(max(limit/32, 256<<10), 256<<20, limit/2)
}

// Sample sets what the store uses now and its limit (0 or less: unknown).
func (r *Reserve) Sample(used, limit int64) {
	r.sampled(r.stored.Load(), used, limit)
}

// sampled sets a sample asked for when stored was mark. The base is set
// before the mark, and Room reads the mark first: a reader between the
// two sees the new base with the old mark, which counts the jobs stored
// in between twice, never none.
func (r *Reserve) sampled(mark, used, limit int64) {
	r.limit.Store(max(limit, 0))
	r.base.Store(used)
	r.mark.Store(mark)
}

// Run samples the store with sample every ReserveEvery until ctx ends,
// the first time ReserveEvery from now (a first Sample is the caller's). A
// sample that fails keeps the last one, and what was stored since counts.
func (r *Reserve) Run(ctx context.Context, sample func(context.Context) (used, limit int64, err error)) {
	t := time.NewTicker(ReserveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, ReserveEvery)
		mark := r.stored.Load()
		used, limit, err := sample(sctx)
		cancel()
		if err == nil {
			r.sampled(mark, used, limit)
		}
	}
}

// Room returns what the store uses (as last sampled, plus what was stored
// since and what is being stored), its limit, and whether the limit is
// known.
func (r *Reserve) Room() (used, limit int64, known bool) {
	if r == nil {
		return 0, 0, false
	}
	limit = r.limit.Load()
	return r.use(), limit, limit > 0
}

// use is what the store uses, as far as r knows.
func (r *Reserve) use() int64 {
	mark := r.mark.Load()
	return r.base.Load() + r.stored.Load() - mark + r.pending.Load()
}

// ErrReserve is the cause of a job refused by a Reserve (wrapped with
// ErrStorageFull).
var ErrReserve = errors.New("the store is within the room kept from jobs")

// take counts a message of n bytes about to be stored, or refuses it when
// it would enter the reserve. A job taken is given back with done once
// its store is answered.
func (r *Reserve) take(n int64) error {
	if r == nil {
		return nil
	}
	r.pending.Add(n) // counted whatever the limit: done gives it back
	limit := r.limit.Load()
	if limit <= 0 {
		return nil
	}
	keep := ReserveFor(limit)
	if used := r.use(); used > limit-keep {
		r.pending.Add(-n)
		return &opError{"queue: admit", ErrStorageFull, fmt.Errorf("%w: JetStream's store holds %s of %s (with the jobs being stored), and its last %s are kept for the shapers' own writes (lease renewals, membership, job records)",
			ErrReserve, FormatBytes(used-n), FormatBytes(limit), FormatBytes(keep))}
	}
	return nil
}

// done gives back a job of n bytes that take counted, once its store was
// answered: stored says it was (or may have been), and it then counts as
// stored until the next sample.
func (r *Reserve) done(n int64, stored bool) {
	if r == nil || n == 0 {
		return
	}
	if stored {
		r.stored.Add(n) // first: the job is never uncounted
	}
	r.pending.Add(-n)
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
