package shaper

import (
	"context"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/internal/ui"
)

// The policy table is what the operator page's series sample.
var _ ui.Source = (*table)(nil)

// Figures returns every policy's figures from memory (ui.Source).
func (t *table) Figures() []ui.Figures {
	lines := t.snapshot()
	out := make([]ui.Figures, 0, len(lines))
	for _, line := range lines {
		ds, c := line.Drain.Stats(), line.Gate.Counts()
		out = append(out, ui.Figures{
			Policy:      line.name,
			Admitted:    c.Admitted,
			Rejected:    c.Rejected,
			Deferred:    c.Deferred,
			Delivered:   ds.Delivered,
			Failed:      ds.Failed,
			Queued:      ds.Queued,
			DeferQueued: line.DeferDrain.Stats().Queued,
		})
	}
	return out
}

// Depths returns the jobs stored per key of the policy's queue (ui.Source).
func (t *table) Depths(ctx context.Context, policy string) (map[string]uint64, error) {
	line := t.line(policy)
	if line == nil {
		return nil, nil
	}
	return line.queue.Depths(ctx)
}

// File returns the policy as the policy file says (ui.Source).
func (t *table) File(policy string) (policies.Policy, bool) { return t.fileVersion(policy) }
