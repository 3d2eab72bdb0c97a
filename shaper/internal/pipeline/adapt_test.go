package pipeline

import (
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/drain/adapt"
	"github.com/shaper-dev/shaper/policies"
)

// The policy's adapt block reaches the drain field by field, and the two
// packages agree on the defaults they both document.
func TestAdaptOf(t *testing.T) {
	if policies.DefaultAdaptFloorShare != adapt.DefaultFloorShare || policies.DefaultAdaptTolerance != adapt.DefaultTolerance {
		t.Errorf("defaults differ: policies floor share %v tolerance %v, drain/adapt %v %v",
			policies.DefaultAdaptFloorShare, policies.DefaultAdaptTolerance, adapt.DefaultFloorShare, adapt.DefaultTolerance)
	}
	p := policies.Policy{Outflow: policies.Rate{N: 50, Per: time.Second}, Total: policies.Rate{N: 200, Per: time.Second},
		Adapt: &policies.Adapt{Per: policies.AdaptPerPolicy, Floor: policies.Rate{N: 20, Per: time.Minute}, Latency: time.Second, Tolerance: 2}}
	want := drain.Adapt{Scope: drain.AdaptPolicy, Config: adapt.Config{Floor: 1.0 / 3, Latency: time.Second, Tolerance: 2}}
	if got := Pace(p).Adapt; got != want {
		t.Errorf("Pace(%+v).Adapt = %+v, want %+v", p.Adapt, got, want)
	}
	if got := DeferPace(p).Adapt; got != (drain.Adapt{}) {
		t.Errorf("DeferPace().Adapt = %+v, want off: re-admissions keep the fixed outflow", got)
	}
	p.Adapt.Per = policies.AdaptPerKey
	if got := Pace(p).Adapt.Scope; got != drain.AdaptKey {
		t.Errorf("per key: scope %v, want key", got)
	}
	p.Adapt = nil
	if got := Pace(p).Adapt; got != (drain.Adapt{}) {
		t.Errorf("no adapt block: %+v, want off", got)
	}
}
