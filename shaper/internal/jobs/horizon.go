package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/shaper-dev/shaper/queue"
)

// A job gone from its queue without a record was delivered only if no
// record of it was dropped: records go by age and by count, oldest first,
// and a dropped dead letter's record would turn a dead job into a
// delivered one. Horizon marks say which jobs that cannot have happened
// to.
//
// A mark of a policy is a message in the records' stream with the pair
// (after, last): the stream's last sequence, read first, and the queue's
// last sequence, read second. A job of the queue stored past last was
// admitted after the first read, so every record about it comes after
// after. While the records' stream still holds every message past after,
// a job past last without a record has none, and if it has left its queue
// it was delivered. The oldest mark that still holds gives the horizon:
// how far back a delivered job's status can be told.
type mark struct {
	After uint64 `json:"after"` // the records' last sequence, read before Last
	Epoch int64  `json:"epoch"` // the queue stream's creation (queue.ParseJobID)
	Last  uint64 `json:"last"`  // the queue's last sequence
}

// markSubjects returns the subject of a new mark of policy and the filter
// of all of them. Marks have subjects of their own (one message per
// subject is kept), with one more token than a record's.
func markSubjects(policy string) (subject, filter string) {
	prefix := subjectRoot + "horizon." + policy + "."
	return prefix + nuid.Next(), prefix + "*"
}

// MarkInterval returns how often marks are written: 1/96 of the TTL (15
// minutes of a day), at least every second. A job admitted within the
// last interval of the horizon may already be past it.
func (s *Store) MarkInterval() time.Duration { return max(s.cfg.TTL/96, time.Second) }

// Mark writes a horizon mark of policy's queue q now.
func (s *Store) Mark(ctx context.Context, policy string, q *queue.Queue) error {
	if s == nil {
		return nil
	}
	return s.mark(ctx, policy, q)
}

// mark writes a horizon mark of policy's queue q, published with opts.
func (s *Store) mark(ctx context.Context, policy string, q *queue.Queue, opts ...jetstream.PublishOpt) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("horizon of %s: %w", policy, err)
	}
	last, err := q.LastSeq(ctx)
	if err != nil {
		return fmt.Errorf("horizon of %s: %w", policy, err)
	}
	m := mark{After: info.State.LastSeq, Last: last}
	if m.Epoch, _, _ = queue.ParseJobID(q.JobID(max(last, 1))); m.Epoch == 0 {
		return fmt.Errorf("horizon of %s: no epoch in %q", policy, q.JobID(1))
	}
	b, _ := json.Marshal(m)
	subject, _ := markSubjects(policy)
	if _, err := s.js.Publish(ctx, subject, b, opts...); err != nil {
		return fmt.Errorf("horizon of %s: %w", policy, err)
	}
	return nil
}

// KeepHorizon writes a mark of policy's queue q every MarkInterval until
// ctx ends, unless another shaper wrote one since.
func (s *Store) KeepHorizon(ctx context.Context, policy string, q *queue.Queue) {
	if s == nil {
		return
	}
	every := s.MarkInterval()
	_, filter := markSubjects(policy)
	// Shapers started together tick out of step, so that one sees the
	// other's mark and skips its own.
	wait := time.NewTimer(rand.N(every))
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
			wait.Reset(every)
		}
		cctx, cancel := context.WithTimeout(ctx, min(every, 10*time.Second))
		err := s.markUnlessMarked(cctx, policy, q, filter, every)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("job status horizon not marked", "policy", policy, "err", err)
		}
		cancel()
	}
}

// markUnlessMarked writes a mark of policy's queue q unless one was written
// under filter within the last 9/10 of every. The mark is published only
// if the last one under filter is still the one read, so that of shapers
// ticking together one writes and the others see its mark and skip.
func (s *Store) markUnlessMarked(ctx context.Context, policy string, q *queue.Queue, filter string, every time.Duration) error {
	expect, due := s.markDue(ctx, filter, every)
	if !due {
		return nil
	}
	return s.markExpecting(ctx, policy, q, expect)
}

// markDue reads the last mark under filter: due when none was written in
// the last 9/10 of every, with the publish options that expect it to be
// still the last (none when it cannot be read).
func (s *Store) markDue(ctx context.Context, filter string, every time.Duration) (expect []jetstream.PublishOpt, due bool) {
	switch latest, err := s.stream.GetLastMsgForSubject(ctx, filter); {
	case err == nil && time.Since(latest.Time) < every*9/10:
		return nil, false
	case err == nil:
		return []jetstream.PublishOpt{jetstream.WithExpectLastSequenceForSubject(latest.Sequence, filter)}, true
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return []jetstream.PublishOpt{jetstream.WithExpectLastSequenceForSubject(0, filter)}, true
	}
	return nil, true
}

// markExpecting writes a mark of policy's queue q published with expect;
// a mark refused because another was written since the read is no error.
func (s *Store) markExpecting(ctx context.Context, policy string, q *queue.Queue, expect []jetstream.PublishOpt) error {
	err := s.mark(ctx, policy, q, expect...)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return nil
	}
	return err
}

// covers reports whether a job of policy stored at seq in a queue stream
// of the given epoch is within the horizon: every record written about it
// is still kept.
func (s *Store) covers(ctx context.Context, policy string, epoch int64, seq uint64) (bool, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return false, err
	}
	first := info.State.FirstSeq
	_, filter := markSubjects(policy)
	// The oldest mark kept is usually the one: its After is past what was
	// dropped unless it was written just after the drop began. Try a few.
	from := first
	for range 4 {
		raw, err := s.stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		var m mark
		if json.Unmarshal(raw.Data, &m) != nil || m.After+1 < first {
			from = raw.Sequence + 1
			continue
		}
		switch {
		case m.Epoch < epoch: // the queue's stream was made after the mark
			return true, nil
		case m.Epoch == epoch:
			return seq > m.Last, nil
		default:
			return false, nil
		}
	}
	return false, nil
}
