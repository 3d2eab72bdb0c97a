package drain

import (
	"cmp"
	"slices"
)

// The deepest keys: a Drainer lists its keys with jobs by depth as their
// depths change (keyState.setDepth), so that Deepest answers in time that
// grows with the keys it returns, not with the keys held.

// KeyDepth is a key with the jobs stored for it, as far as its Drainer saw.
type KeyDepth struct {
	Key   string `json:"key"`
	Depth int64  `json:"depth"`
}

// Deepest returns the n keys with the most jobs, deepest first. Of keys
// with as many jobs, those it returns are ordered by key, but which of
// them make the n is not said. It costs what it returns, however many keys
// the Drainer holds (and the keys deeper than maxLevel jobs, which it
// sorts).
func (d *Drainer) Deepest(n int) []KeyDepth {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []KeyDepth
	for l := len(d.counts.levels); l > 0 && len(out) < n; l-- {
		from := len(out)
		for k := d.counts.levels[l-1]; k != nil && (l == maxLevel || len(out) < n); k = k.down {
			out = append(out, KeyDepth{Key: k.name, Depth: k.depth})
		}
		slices.SortFunc(out[from:], byDepth)
	}
	return out[:min(n, len(out))]
}

// byDepth orders keys deepest first, by key on a tie.
func byDepth(a, b KeyDepth) int {
	return cmp.Or(cmp.Compare(b.Depth, a.Depth), cmp.Compare(a.Key, b.Key))
}

// Deepest returns the n keys of every partition with the most jobs,
// deepest first (Drainer.Deepest).
func (g *Group) Deepest(n int) []KeyDepth {
	if len(g.parts) == 1 {
		return g.parts[0].Deepest(n)
	}
	var out []KeyDepth
	for _, d := range g.parts {
		out = append(out, d.Deepest(n)...)
	}
	slices.SortFunc(out, byDepth)
	return out[:min(n, len(out))]
}
