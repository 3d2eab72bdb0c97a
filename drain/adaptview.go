package drain

import (
	"github.com/shaper-dev/shaper/drain/adapt"
	"github.com/shaper-dev/shaper/queue"
)

// Adapting returns what the Group's adaptive pace does now: the total's
// effective rate over the partitions this Group drains (AdaptPolicy), and
// the effective rates of the n deepest keys that adapt (AdaptKey); nil
// when nothing adapts here.
func (g *Group) Adapting(n int) *adapt.Rates {
	var out adapt.Rates
	var shares []adapt.Status
	for _, d := range g.parts {
		if st, ok := d.AdaptStatus(""); ok && d.Active() {
			shares = append(shares, st)
		}
	}
	if sum, ok := adapt.Sum(shares); ok {
		out.Policy = &sum
	}
	for _, k := range g.Deepest(n) {
		token, err := queue.EncodeKey(k.Key)
		if err != nil {
			continue
		}
		if st, ok := g.For(token).AdaptStatus(token); ok {
			out.Keys = append(out.Keys, adapt.KeyStatus{Key: k.Key, Depth: k.Depth, Status: st})
		}
	}
	if out.Policy == nil && out.Keys == nil {
		return nil
	}
	return &out
}
