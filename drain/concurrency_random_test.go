package drain_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
)

// Randomized schedules on the virtual clock: random limits, receipt
// latencies, failures and budgets, and for odd seeds live changes of the
// limits and a pause of the drain; whatever they are, a key never has
// more than Key deliveries awaiting receipt nor the Drainer more than
// Total (without live changes), a key's first attempts start in order
// and within its outflow, every job is delivered once, and every slot is
// freed in the end.
func TestConcurrencyRandomSchedules(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			noDeadlock(t, func() {
				synctest.Test(t, func(t *testing.T) { randomSchedule(t, seed) })
			})
		})
	}
}

func randomSchedule(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	interval := time.Duration(5+rng.IntN(50)) * time.Millisecond
	c := drain.Concurrency{Key: 1 + rng.IntN(4)}
	if rng.IntN(2) == 0 {
		c.Total = c.Key + rng.IntN(5)
	}
	pace := drain.Pace{Interval: interval, Concurrency: c, Retry: drain.Retry{Backoff: time.Duration(20+rng.IntN(200)) * time.Millisecond}}
	if rng.IntN(2) == 0 {
		pace.Retry.Budget = 0.1 + 0.8*rng.Float64()
	}
	failShare := rng.Float64() * 0.3
	keys, perKey := 1+rng.IntN(5), 5+rng.IntN(20)
	r := newMemRig(t, 100, pace, drain.Config{Workers: 4 + rng.IntN(16)})
	what := fmt.Sprintf("seed %d: interval %v, %+v, budget %.2f, %.0f%% failing, %d keys × %d jobs", seed, interval, c, pace.Retry.Budget, 100*failShare, keys, perKey)

	var (
		mu              sync.Mutex
		open            = map[string]int{}
		openAll         int
		firstTries      = map[string][]drain.Delivery{}
		tried           = map[string]bool{}
		delivered       = map[string]int{}
		breaches        []string
		latency, failed = map[string]time.Duration{}, map[string]bool{}
	)
	for k := range keys {
		for j := range perKey {
			id := fmt.Sprintf("k%d-%d", k, j)
			latency[id] = time.Duration(rng.IntN(300)) * time.Millisecond
			failed[id] = rng.Float64() < failShare
		}
	}
	r.sink.setFail(func(d *drain.Delivery) error {
		mu.Lock()
		key, id := d.Msg.Key, d.Msg.ID
		open[key]++
		openAll++
		if seed%2 == 0 && (open[key] > c.Key || c.Total > 0 && openAll > c.Total) { // the limits of the start: no live changes
			breaches = append(breaches, fmt.Sprintf("%s started with %d of its key and %d in all awaiting receipt", id, open[key], openAll))
		}
		if !tried[id] {
			tried[id] = true
			firstTries[key] = append(firstTries[key], *d)
		}
		fail := failed[id] && d.Msg.Attempt == 1
		wait := latency[id]
		mu.Unlock()
		time.Sleep(wait)
		mu.Lock()
		defer mu.Unlock()
		open[key]--
		openAll--
		if fail {
			return fmt.Errorf("%w: random failure", drain.ErrDelivery)
		}
		delivered[id]++
		return nil
	})
	for k := range keys {
		r.admit(fmt.Sprint("k", k), perKey)
	}
	r.d.Start(t.Context())
	if seed%2 == 1 {
		// Live changes meanwhile: the limits, and a pause of the drain.
		live := pace
		changes := []func(){
			func() { live.Concurrency = drain.Concurrency{Key: 1 + rng.IntN(4)}; r.d.SetPace(live) },
			func() { live.Concurrency.Total = live.Concurrency.Key + rng.IntN(3); r.d.SetPace(live) },
			func() {
				r.d.SetActive(false)
				elapse(time.Duration(rng.IntN(300)) * time.Millisecond)
				r.d.SetActive(true)
			},
		}
		for range 3 {
			elapse(time.Duration(rng.IntN(500)) * time.Millisecond)
			changes[rng.IntN(len(changes))]()
		}
		what += " with live changes"
	}
	r.sink.wait(t, keys*perKey, 10*time.Minute)
	checkSettled(t, r)

	mu.Lock()
	defer mu.Unlock()
	for _, b := range breaches[:min(3, len(breaches))] {
		t.Errorf("%s: %s", what, b)
	}
	for k := range keys {
		key := fmt.Sprint("k", k)
		for j, d := range firstTries[key] {
			if want := fmt.Sprintf("%s-%d", key, j); d.Msg.ID != want {
				t.Errorf("%s: key %s's first attempt %d is %s, want %s (in order)", what, key, j, d.Msg.ID, want)
				break
			}
		}
		for j := range perKey {
			if id := fmt.Sprintf("%s-%d", key, j); delivered[id] != 1 {
				t.Errorf("%s: %s delivered %d times, want once", what, id, delivered[id])
			}
		}
	}
	for key, ds := range byKey(r.sink.tries()) {
		for _, w := range []time.Duration{interval, 4 * interval, 20 * interval} {
			if got, limit := maxInWindow(ds, w), int((w+interval-1)/interval)+1; got > limit {
				t.Errorf("%s: key %s started %d attempts within %v, want at most %d", what, key, got, w, limit)
			}
		}
	}
}
