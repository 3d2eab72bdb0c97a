package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// step is the I/O a worker does for one key at one time, in this order:
// deliver the held job (or dead-letter it), free the slots of jobs
// delivered before, read the new head. The scheduler fills in the plan
// under the Drainer's lock; run does the I/O without it; complete applies
// the results under it again.
type step struct {
	k          *keyState
	deliver    *queue.Msg
	deadLetter *queue.Msg // dead-letter this job instead of delivering it
	reason     string
	history    []string
	scheduled  time.Time
	remove     []uint64
	read       bool
	from       uint64
	exact      []uint64 // read the head at the first of these sequences still stored

	// results
	started  time.Time
	err      error
	deadErr  error
	removeOK bool
	head     *queue.Msg
	readErr  error
	missing  []uint64 // exact sequences found gone
	failure  *Event   // the failed delivery, reported once complete

	delivery Delivery // what the sink is handed
}

// reset empties s for a new step of k, keeping its slices' room.
func (s *step) reset(k *keyState) *step {
	remove, exact, missing := s.remove[:0], s.exact[:0], s.missing[:0]
	*s = step{k: k, remove: remove, exact: exact, missing: missing}
	return s
}

// run does s's I/O, without the Drainer's lock, and reports a delivery or
// a dead letter as soon as it happened.
func (d *Drainer) run(ctx context.Context, s *step) {
	if s.deliver != nil {
		s.started = d.clock.Now()
		s.delivery = Delivery{Policy: d.policy, Token: s.k.token, Msg: s.deliver}
		s.err = d.sink.Deliver(ctx, &s.delivery)
		if s.err != nil {
			s.read = false
		} else {
			d.delivered.Add(1)
			if d.cfg.OnDeliver != nil {
				d.cfg.OnDeliver(Event{Key: s.deliver.Key, ID: s.deliver.ID, Attempt: s.deliver.Attempt,
					Enqueued: s.deliver.EnqueuedAt, Scheduled: s.scheduled, Started: s.started})
			}
		}
	}
	if s.deadLetter != nil {
		s.deadErr = d.cfg.DeadLetter(ctx, s.deadLetter, s.reason, s.history)
		if s.deadErr == nil {
			s.deadErr = d.q.Remove(ctx, s.deadLetter.Seq)
		}
		if s.deadErr != nil {
			s.read = false
			d.log.Warn("drain: dead-letter", "key", s.k.name, "job", s.deadLetter.ID, "reason", s.reason, "err", s.deadErr)
		} else {
			d.dead.Add(1)
			if d.cfg.OnDeliver != nil {
				d.cfg.OnDeliver(Event{Key: s.deadLetter.Key, ID: s.deadLetter.ID, Attempt: s.deadLetter.Attempt,
					Enqueued: s.deadLetter.EnqueuedAt, Reason: s.reason, Started: d.clock.Now()})
			}
		}
	}
	if len(s.remove) > 0 {
		s.removeOK = true
		for _, seq := range s.remove {
			if err := d.q.Remove(ctx, seq); err != nil {
				s.removeOK = false
				d.log.Warn("drain: free slot", "key", s.k.name, "seq", seq, "err", err)
				break
			}
		}
	}
	if s.read {
		var last uint64 // the queue's last sequence, asked at most once a step
		for _, seq := range s.exact {
			s.head, s.readErr = d.readAt(ctx, s.k, seq, &last)
			if !errors.Is(s.readErr, queue.ErrEmpty) {
				break
			}
			s.missing = append(s.missing, seq)
		}
		if s.head == nil && s.readErr == nil {
			s.readErr = queue.ErrEmpty
		}
	}
}

// readAt reads k's job at seq. It answers ErrEmpty only for a job gone for
// good (removed by the drainer this one took over from): a job not found is
// gone only when the queue (the stream leader) has stored past it and a
// second read still misses it, since in a cluster the server running the
// watch can store a job before the leader that answers reads does (seen: a
// job skipped, and left queued, in a steady R3 cluster). *last caches the
// last sequence across the reads of one step (0: not asked yet); the second
// read always follows the asking.
func (d *Drainer) readAt(ctx context.Context, k *keyState, seq uint64, last *uint64) (*queue.Msg, error) {
	m, err := d.q.Get(ctx, k.token, seq)
	if !errors.Is(err, queue.ErrEmpty) {
		return m, err
	}
	if *last == 0 {
		if *last, err = d.q.LastSeq(ctx); err != nil {
			return nil, err
		}
	}
	if seq > *last {
		return nil, fmt.Errorf("drain: job %d not readable yet: the queue's last is %d", seq, *last)
	}
	m, err = d.q.Get(ctx, k.token, seq)
	if d.debug && !errors.Is(err, queue.ErrEmpty) {
		d.log.Debug("drain: job found on the second read", "key", k.name, "seq", seq, "last", *last, "err", err)
	}
	return m, err
}
