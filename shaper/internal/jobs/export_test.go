package jobs

import (
	"context"

	"github.com/shaper-dev/shaper/queue"
)

// MarkRacing is one tick of KeepHorizon with between run after the last
// mark is read and before the new one is published: another shaper's
// tick landing in that gap.
func (s *Store) MarkRacing(ctx context.Context, policy string, q *queue.Queue, between func()) error {
	every := s.MarkInterval()
	_, filter := markSubjects(policy)
	expect, due := s.markDue(ctx, filter, every)
	if !due {
		return nil
	}
	between()
	return s.markExpecting(ctx, policy, q, expect)
}
