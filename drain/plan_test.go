package drain_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// TestStartIn checks the drain's one schedule against what the drain then
// does: for random policies (an interval, often a total cap shared by up
// to 30 keys, a retry budget or none), a burst of jobs on random keys, a
// first stretch of deliveries in which some attempts fail (and are
// retried later, stepped aside or at the head), and then a downstream
// that takes everything, the start StartIn predicts for every fresh job
// waiting must be when the job starts, within one slot.
func TestStartIn(t *testing.T) {
	for seed := range uint64(2000) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkStartIn(t, seed, 30, 150, 1) })
	}
}

// TestStartInTotalSetLive: the same, the total cap set live (as policies
// set or a reload does) just before the predictions, over keys that
// queued at their own pace until then, some of them waiting out a
// retry's backoff: each joins the rounds when its backoff ends.
func TestStartInTotalSetLive(t *testing.T) {
	for seed := range uint64(500) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkStartIn(t, seed|1<<32, 30, 150, 1) })
	}
}

// TestStartInManyKeys: the same with hundreds of keys sharing a total cap.
func TestStartInManyKeys(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkStartIn(t, seed, 1200, 2500, 1) })
	}
}

// checkStartIn runs one random schedule of at most maxKeys keys and
// maxJobs jobs, and checks that jobs start within slack slots of StartIn's
// prediction.
func checkStartIn(t *testing.T, seed uint64, maxKeys, maxJobs int, slack time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 7))
	intervals := []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second}
	pace := drain.Pace{Interval: intervals[rng.IntN(len(intervals))]}
	if rng.IntN(3) > 0 || seed>>32 == 1 {
		pace.Total = time.Duration(rng.IntN(1000)+1) * time.Millisecond
	}
	budgets := []float64{0, 0.2, 0.5, 1}
	pace.Retry = drain.Retry{Backoff: 300 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, Budget: budgets[rng.IntN(len(budgets))]}
	live := pace
	if seed>>32 == 1 { // the cap is set live, after the first deliveries
		pace.Total = 0
	}
	r := newReplay(t, 1000, pace, drain.Config{})
	r.quiet = true
	starts := map[string]time.Time{}
	tried := map[string]bool{}
	setLive := live != pace
	failing := true
	r.fail = func(d *drain.Delivery) error {
		tried[d.Msg.ID] = true
		if failing && rng.IntN(3) == 0 {
			return errors.New("down")
		}
		if _, again := starts[d.Msg.ID]; !again {
			starts[d.Msg.ID] = r.clock.Now()
		}
		return nil
	}
	keys, jobs := maxKeys/2+rng.IntN(maxKeys/2)+1, maxJobs/2+rng.IntN(maxJobs/2)+1
	order := map[string][]string{}
	ctx := context.Background()
	for i := range jobs {
		key, id := fmt.Sprintf("k%d", rng.IntN(keys)), fmt.Sprintf("j%d", i)
		if _, err := r.q.Admit(ctx, queue.Job{ID: id, Key: key}); err != nil {
			t.Fatal(err)
		}
		order[key] = append(order[key], id)
	}
	// Some deliveries, some failing; then the downstream is well again.
	r.until(r.clock.Now().Add(time.Duration(rng.IntN(3000)) * time.Millisecond))
	failing = false
	if setLive {
		pace = live
		r.d.SetPace(pace)
	}
	now := r.clock.Now()
	predicted := map[string]time.Time{}
	retrying := map[string]bool{} // keys with a failed job waiting for its retry
	for key, ids := range order {
		n := int64(0)
		for _, id := range ids {
			if tried[id] {
				if _, ok := starts[id]; !ok {
					retrying[key] = true
				}
				continue // delivered, or failed and waiting for its retry
			}
			n++
			predicted[id] = now.Add(r.d.StartIn(key, n, now))
		}
	}
	r.until(now.Add(24 * time.Hour))
	for key, ids := range order {
		// Within one slot (or slack). Keys that wait out a retry's backoff
		// join the others' rounds when it ends, counted exactly. Under a
		// cap with slots reserved ahead (not when it was just set), the
		// rounds that pass while the asking key waits out its own backoff
		// are estimated: within the backoff and a slot.
		slot := max(pace.Interval, pace.Total)
		tolerance := slack * slot
		if pace.Total > 0 && len(retrying) > 0 && !setLive {
			tolerance = max(tolerance, pace.Retry.MaxBackoff+slot)
		}
		for _, id := range ids {
			want, ok := predicted[id]
			if !ok {
				continue
			}
			got, ok := starts[id]
			if !ok {
				t.Fatalf("%s never delivered", id)
			}
			if d := got.Sub(want); d > tolerance || d < -tolerance {
				t.Errorf("pace %+v, %d keys, %d jobs: %s of %s started %v after its predicted start, more than %v (slots of %v)",
					pace, keys, jobs, id, key, d, tolerance, slot)
			}
		}
	}
}

// TestStartInBeforeTheDrainerSteps: jobs of new keys the drainer has seen
// but not yet stepped (no slot reserved under the total cap yet) take the
// cap's slots in the order they came; each one's start counts those ahead.
func TestStartInBeforeTheDrainerSteps(t *testing.T) {
	r := newReplay(t, 10, drain.Pace{Interval: 100 * time.Millisecond, Total: time.Second}, drain.Config{})
	now := r.clock.Now()
	for i := range 8 {
		r.admit(t, fmt.Sprintf("k%d", i), fmt.Sprintf("j%d", i)) // seen at once (MemQueue), not stepped
		if got, want := r.d.StartIn(fmt.Sprintf("k%d", i), 1, now), time.Duration(i)*time.Second; got != want {
			t.Errorf("key %d's first job starts in %v, want %v", i, got, want)
		}
	}
	var starts []string
	r.fail = func(d *drain.Delivery) error {
		starts = append(starts, fmt.Sprintf("%v %s", r.clock.Now().Sub(now), d.Msg.ID))
		return nil
	}
	r.until(now.Add(time.Minute))
	if want := "[0s j0 1s j1 2s j2 3s j3 4s j4 5s j5 6s j6 7s j7]"; fmt.Sprint(starts) != want {
		t.Errorf("started %v, want %s", starts, want)
	}
}

// TestStartInAfterTotalSwitchedOn: a total cap set live over keys that
// queue jobs at their own pace. Each key's next job then waits for the
// other keys' turns too, and StartIn says so at once (a tour found every
// key answered alike for about a second, the last key's answer 3 slots
// early).
func TestStartInAfterTotalSwitchedOn(t *testing.T) {
	r := newReplay(t, 100, drain.Pace{Interval: 500 * time.Millisecond}, drain.Config{})
	starts := map[string]time.Time{}
	r.fail = func(d *drain.Delivery) error {
		starts[d.Msg.ID] = r.clock.Now()
		return nil
	}
	keys := []string{"g1", "g2", "g3", "g4"}
	for _, key := range keys {
		for j := range 4 {
			r.admit(t, key, fmt.Sprintf("%s-%d", key, j))
		}
	}
	r.until(r.clock.Now().Add(800 * time.Millisecond))
	r.d.SetPace(drain.Pace{Interval: 500 * time.Millisecond, Total: time.Second})
	now := r.clock.Now()
	predicted := map[string]time.Time{}
	for _, key := range keys {
		r.admit(t, key, key+"-last")
		fresh := int64(0)
		for j := range 5 {
			id := fmt.Sprintf("%s-%d", key, j)
			if j == 4 {
				id = key + "-last"
			}
			if _, ok := starts[id]; !ok {
				fresh++
			}
		}
		predicted[key+"-last"] = now.Add(r.d.StartIn(key, fresh, now))
	}
	r.until(now.Add(time.Minute))
	checkPredicted(t, r, predicted, starts, now, time.Second)
}

// checkPredicted checks that every job predicted started within a slot
// (of the total cap) of its prediction, made at now.
func checkPredicted(t *testing.T, r *replay, predicted, starts map[string]time.Time, now time.Time, slot time.Duration) {
	t.Helper()
	for id, want := range predicted {
		if d := starts[id].Sub(want); d > slot || d < -slot {
			t.Errorf("%s started %v after its predicted start (%v from the prediction), more than a slot of the total (%v)", id, d, want.Sub(now), slot)
		}
	}
	if t.Failed() {
		t.Logf("started: %v", r.log)
	}
}

// TestStartInKeyBackFromBackoff: a key waiting out a long retry backoff
// under a binding total cap joins the other keys' rounds only when its
// backoff ends; until then they share the cap's slots without it, and
// StartIn counts them so (it took the key to be in every round, each job
// of the others answered later by up to a slot a round).
func TestStartInKeyBackFromBackoff(t *testing.T) {
	pace := drain.Pace{Interval: 10 * time.Millisecond, Total: 100 * time.Millisecond,
		Retry: drain.Retry{Backoff: 2 * time.Second, MaxBackoff: 2 * time.Second}}
	r := newReplay(t, 100, pace, drain.Config{})
	starts := map[string]time.Time{}
	failed := false
	r.fail = func(d *drain.Delivery) error {
		if d.Msg.ID == "slow-0" && !failed {
			failed = true
			return errors.New("down")
		}
		starts[d.Msg.ID] = r.clock.Now()
		return nil
	}
	for j := range 4 {
		r.admit(t, "slow", fmt.Sprintf("slow-%d", j))
	}
	for _, key := range []string{"a", "b"} {
		for j := range 20 {
			r.admit(t, key, fmt.Sprintf("%s-%d", key, j))
		}
	}
	r.until(r.clock.Now().Add(350 * time.Millisecond))
	if !failed {
		t.Fatal("slow-0 not attempted yet")
	}
	now := r.clock.Now()
	predicted := map[string]time.Time{}
	for _, key := range []string{"a", "b", "slow"} {
		n := int64(0)
		for j := range 20 {
			id := fmt.Sprintf("%s-%d", key, j)
			if _, ok := starts[id]; ok || id == "slow-0" || key == "slow" && j >= 4 {
				continue
			}
			n++
			predicted[id] = now.Add(r.d.StartIn(key, n, now))
		}
	}
	r.until(now.Add(time.Minute))
	checkPredicted(t, r, predicted, starts, now, pace.Total)
}
