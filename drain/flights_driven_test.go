package drain_test

import (
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/drain/downstream"
)

// Deliveries that fly (Concurrency.Key 2), driven on a virtual clock
// against a downstream that slows down until deliveries time out, with a
// retry budget: failed flights step aside while jobs stored meanwhile wake
// their keys. A key woken while a step of it ran keeps its head; it must
// not fall due for a read it cannot make (that spun for ever at one
// instant: `shaper tune --downstream-capacity` on a policy with
// concurrency hung). The drive ends, and every key delivers.
func TestFlightsDrivenAgainstASlowDownstream(t *testing.T) {
	ds := downstream.Config{Capacity: 150, Latency: 20 * time.Millisecond, Timeout: time.Second,
		Phases: []downstream.Phase{{After: 2 * time.Second, Capacity: 10}}}
	pace := drain.Pace{Interval: 200 * time.Millisecond, Concurrency: drain.Concurrency{Key: 2},
		Retry: drain.Retry{Attempts: 10, Backoff: time.Second, MaxBackoff: time.Minute, Budget: 0.2}}
	r := newStepRig(t, pace, map[string]downstream.Config{"": ds})
	keys := manyKeys(20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(t, keys, 10, 10*time.Second, nil)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("driving 10 virtual seconds did not end within a minute: the drainer spins")
	}
	delivered := map[string]int{}
	for _, a := range r.attempts {
		if a.err == nil {
			delivered[a.key]++
		}
	}
	for _, key := range keys {
		if delivered[key] == 0 {
			t.Errorf("key %s delivered nothing in 10 s", key)
		}
	}
	if st := r.d.Stats(); st.Failed == 0 {
		t.Errorf("Stats() = %+v: no delivery failed, so the slow phase did not test failed flights", st)
	}
}
