package drain

import (
	"context"

	"github.com/shaper-dev/shaper/queue"
)

// Queue is what a Drainer needs of a policy's queue: to learn of every job
// stored, to read a key's head by its sequence (and rarely, to find a key's
// first job), to free a job's slot, and, while passive, the number of jobs
// stored per key. *queue.Queue (in
// JetStream) and MemQueue (in memory) satisfy it. Implementations must be
// safe for concurrent use.
type Queue interface {
	// Policy returns the name of the policy the queue belongs to. Every
	// Delivery carries it.
	Policy() string
	// Watch calls fn for every job stored now and every job stored later,
	// until ctx ends: one call at a time, in the order the jobs were
	// stored (ascending sequences), each job once. It returns when ctx
	// ends; an error means it could not watch, and no more jobs will be
	// reported. fn must not call the queue.
	Watch(ctx context.Context, fn func(queue.Notice)) error
	// Get returns the job stored at seq, which must be a job of the key
	// with token token; an error wrapping queue.ErrEmpty when it is gone
	// or belongs to another key. It costs one index lookup, however many
	// jobs are stored.
	Get(ctx context.Context, token string, seq uint64) (*queue.Msg, error)
	// Next returns the first job of the key with token token stored at
	// seq from or after it; an error wrapping queue.ErrEmpty when there is
	// none. It may search the queue. A Drainer asks it only to find jobs it
	// lost track of: after it took over from a drainer with a retry budget,
	// which delivers later jobs while failed ones stay stored (see
	// Retry.Budget), or when reads found jobs gone that it still counted.
	Next(ctx context.Context, token string, from uint64) (*queue.Msg, error)
	// LastSeq returns the sequence of the last job stored. A Drainer asks
	// it before it skips a job Get did not find: a job Watch reported
	// above LastSeq is not readable yet, not gone.
	LastSeq(ctx context.Context) (uint64, error)
	// Remove deletes the job stored at seq, freeing its key's slot.
	// Removing a job that is already gone is not an error.
	Remove(ctx context.Context, seq uint64) error
	// TokenDepths returns the number of jobs stored per key token, and
	// the sequence the count reaches: every job stored up to upTo is
	// counted (or was removed); jobs stored later are not, or only
	// rarely (a job stored while the count is taken). Only a passive
	// Drainer asks, every few seconds, since Watch does not report the
	// jobs another drainer removes.
	TokenDepths(ctx context.Context) (depths map[string]uint64, upTo uint64, err error)
}

var (
	_ Queue = (*queue.Queue)(nil)
	_ Queue = (*MemQueue)(nil)
)

// syncWatcher is a Queue that can report a job from the call that stores
// it (MemQueue): watchNow registers fn, reports every job stored so far
// before it returns, and reports each later job before the call storing it
// returns, until ctx ends. A driven Drainer (Advance) uses it, so that a
// replay is deterministic: the Drainer knows of a job as soon as Admit
// returned.
type syncWatcher interface {
	watchNow(ctx context.Context, fn func(queue.Notice))
}
