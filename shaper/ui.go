package shaper

import (
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
			Rate:        adaptedRate(line.served),
		})
	}
	return out
}

// Deepest returns the n keys of the policy's queue with the most jobs, as
// its drainers (of every partition, active or not) see them (ui.Source).
func (t *table) Deepest(policy string, n int) []ui.KeyDepth {
	line := t.line(policy)
	if line == nil {
		return nil
	}
	top := line.Drain.Deepest(n)
	out := make([]ui.KeyDepth, len(top))
	for i, k := range top {
		out[i] = ui.KeyDepth{Key: k.Key, Depth: uint64(k.Depth)}
	}
	return out
}

// File returns the policy as the policy file says (ui.Source).
func (t *table) File(policy string) (policies.Policy, bool) { return t.fileVersion(policy) }
