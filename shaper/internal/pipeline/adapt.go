package pipeline

import (
	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/drain/adapt"
	"github.com/shaper-dev/shaper/policies"
)

// adaptOf returns the drain's adaptation of a policy's adapt block (nil:
// none, the fixed outflow).
func adaptOf(a *policies.Adapt) drain.Adapt {
	if a == nil {
		return drain.Adapt{}
	}
	scope := drain.AdaptKey
	if a.Per == policies.AdaptPerPolicy {
		scope = drain.AdaptPolicy
	}
	return drain.Adapt{Scope: scope, Config: adapt.Config{
		Floor:     a.Floor.PerSecond(),
		Latency:   a.Latency,
		Tolerance: a.Tolerance,
	}}
}
