package pipeline

import (
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
)

// Pace maps a policy's concurrency to the drainer's; the deferred jobs'
// drainer re-admits one job of a key at a time, whatever the policy says.
func TestPaceConcurrency(t *testing.T) {
	set, err := policies.Parse("p.yaml", []byte("policies:\n  - {name: a, outflow: 10/s, queue: 5, total: 20/s, concurrency: {key: 2, total: 6}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := set.Lookup("a")
	got := Pace(p)
	if got.Interval != 100*time.Millisecond || got.Total != 50*time.Millisecond || got.Concurrency != (drain.Concurrency{Key: 2, Total: 6}) {
		t.Errorf("Pace = %+v, want interval 100ms, total 50ms, concurrency key 2 total 6", got)
	}
	if d := DeferPace(p); d.Concurrency != (drain.Concurrency{}) || d.Interval != got.Interval {
		t.Errorf("DeferPace = %+v, want Pace's interval and one re-admission of a key at a time", d)
	}
}
