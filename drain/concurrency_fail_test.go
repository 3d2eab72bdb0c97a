package drain_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
)

// With Key 2 and no retry budget, a failed job goes back to the head of
// its key: the job already in the air goes on, but no fresh job starts
// until the failed one is delivered; its failure is reported before it is
// tried again; every job is delivered once.
func TestConcurrencyFailureBlocksFreshJobs(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			var (
				mu     sync.Mutex
				events []drain.Event
			)
			pace := drain.Pace{Interval: 10 * time.Millisecond, Concurrency: drain.Concurrency{Key: 2},
				Retry: drain.Retry{Backoff: 300 * time.Millisecond}}
			r := newMemRig(t, 100, pace, drain.Config{Jitter: func() float64 { return 0 }, OnDeliver: func(e drain.Event) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}})
			l := newFlightLog(r, 100*time.Millisecond)
			l.fail = failFirst("k-2")
			ids := r.admit("k", 8)
			r.d.Start(t.Context())
			r.sink.wait(t, 8, time.Minute)

			ss := l.of("k")
			var retried, failedAt time.Time
			for _, s := range ss {
				if s.id == "k-2" && s.attempt == 2 {
					retried = s.at
				}
			}
			mu.Lock()
			for i, e := range events {
				if e.ID == "k-2" && e.Err != nil {
					failedAt = e.Started.Add(100 * time.Millisecond)
					if i+1 < len(events) && events[i+1].ID == "k-2" && events[i+1].Started.Before(e.RetryAt) {
						t.Errorf("k-2 retried at %v, before the failure said (%v)", events[i+1].Started, e.RetryAt)
					}
				}
			}
			mu.Unlock()
			if retried.IsZero() || failedAt.IsZero() {
				t.Fatalf("k-2 was not failed then retried: %+v", ss)
			}
			for _, s := range ss {
				if s.id != "k-2" && s.at.After(failedAt) && s.at.Before(retried) {
					t.Errorf("%s started at %v, between k-2's failure (%v) and its retry (%v): a failed job blocks fresh ones",
						s.id, s.at, failedAt, retried)
				}
			}
			got := deliveredIDs(r.sink.deliveries())
			if !slices.Equal(got, ids) {
				t.Errorf("delivered %v, want each of %v once", got, ids)
			}
			checkSettled(t, r)
		})
	})
}

// With a retry budget a failed job of a key with Key 2 steps aside: the
// fresh jobs go on, and it is delivered later, once.
func TestConcurrencyFailureStepsAsideWithBudget(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			pace := drain.Pace{Interval: 10 * time.Millisecond, Concurrency: drain.Concurrency{Key: 2},
				Retry: drain.Retry{Backoff: 300 * time.Millisecond, Budget: 0.5}}
			r := newMemRig(t, 100, pace, drain.Config{Jitter: func() float64 { return 0 }})
			l := newFlightLog(r, 100*time.Millisecond)
			l.fail = failFirst("k-1")
			ids := r.admit("k", 8)
			r.d.Start(t.Context())
			r.sink.wait(t, 8, time.Minute)
			ss := l.of("k")
			fresh := 0 // fresh jobs started between k-1's failure and its retry
			var failed bool
			for _, s := range ss {
				switch {
				case s.id == "k-1" && s.attempt == 2:
					failed = false
				case s.id == "k-1":
					failed = true
				case failed && s.at.After(ss[1].at.Add(100*time.Millisecond)):
					fresh++
				}
			}
			if fresh == 0 {
				t.Errorf("no fresh job started while k-1 waited for its retry, want them to go on: %+v", ss)
			}
			got := deliveredIDs(r.sink.deliveries())
			if !slices.Equal(got, ids) {
				t.Errorf("delivered %v, want each of %v once", got, ids)
			}
			checkSettled(t, r)
			if st := r.d.Stats(); st.Retries != 1 || st.Failed != 1 || st.SteppedAside != 0 {
				t.Errorf("Stats = %+v, want one retry, one failure, none aside", st)
			}
		})
	})
}

// failFirst fails the first attempt of job id.
func failFirst(id string) func(d *drain.Delivery) error {
	return func(d *drain.Delivery) error {
		if d.Msg.ID == id && d.Msg.Attempt == 1 {
			return fmt.Errorf("%w: consumer error", drain.ErrDelivery)
		}
		return nil
	}
}

// deliveredIDs returns the ids delivered, sorted by their number.
func deliveredIDs(ds []delivery) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.id
	}
	slices.SortFunc(ids, func(a, b string) int {
		var x, y int
		fmt.Sscanf(a[len("k-"):], "%d", &x)
		fmt.Sscanf(b[len("k-"):], "%d", &y)
		return x - y
	})
	return ids
}

// Lowering Key live (SetPace) applies at once: the deliveries in the air
// land, and no new one starts while the key has as many as the new limit.
func TestConcurrencySetPaceLowersKey(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			pace := drain.Pace{Interval: 10 * time.Millisecond, Concurrency: drain.Concurrency{Key: 3}}
			r := newMemRig(t, 200, pace, drain.Config{})
			l := newFlightLog(r, 200*time.Millisecond)
			r.admit("k", 60)
			r.d.Start(t.Context())
			elapse(time.Second + 3*time.Millisecond) // between two slots: nothing starts at the instant of the change
			pace.Concurrency.Key = 1
			r.d.SetPace(pace)
			changed := time.Now()
			r.sink.wait(t, 60, time.Minute)
			before, after := 0, 0
			for _, s := range l.of("k") {
				switch {
				case s.at.Before(changed):
					before = max(before, s.ofKey)
				case s.ofKey > 1:
					t.Errorf("%s started at +%v after Key went to 1 with %d in the air", s.id, s.at.Sub(changed), s.ofKey)
				default:
					after++
				}
			}
			if before != 3 || after == 0 {
				t.Errorf("at most %d in the air before, %d starts after the change, want 3 and some", before, after)
			}
		})
	})
}

// The schedule counts the receipts: with Key 2 and 500 ms receipts a key
// with an outflow of 10/s goes at 4/s, and StartIn says so, within 10 %.
func TestConcurrencyStartInCountsReceipts(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			interval, latency := 100*time.Millisecond, 500*time.Millisecond
			r := newMemRig(t, 100, drain.Pace{Interval: interval, Concurrency: drain.Concurrency{Key: 2}}, drain.Config{})
			l := newFlightLog(r, latency)
			r.admit("k", 60)
			r.d.Start(t.Context())
			const n = 20
			eta, actual := startInAndStart(t, r, l, "k", n, 60)
			t.Logf("StartIn(%d) = %v; the job started after %v", n, eta, actual)
			want := time.Duration(n) * time.Second / 4
			if diff := (eta - actual).Abs(); diff > actual/10 {
				t.Errorf("StartIn(%d) = %v, the job started after %v, want within 10%%", n, eta, actual)
			}
			if diff := (actual - want).Abs(); diff > want/10 {
				t.Errorf("the %d-th job started after %v, want about %v (4/s)", n, actual, want)
			}
		})
	})
}

// Driven by Advance, a delivery's receipt comes before Advance goes on:
// with any Key the deliveries are those of the step model, at the same
// virtual times, failures and retries included.
func TestConcurrencyDrivenMatchesSteps(t *testing.T) {
	run := func(key int) []string {
		pace := drain.Pace{Interval: 100 * time.Millisecond, Concurrency: drain.Concurrency{Key: key},
			Retry: drain.Retry{Backoff: 250 * time.Millisecond}}
		r := newReplay(t, 50, pace, drain.Config{Jitter: func() float64 { return 0 }})
		tries := map[string]int{}
		r.fail = func(d *drain.Delivery) error {
			tries[d.Msg.ID]++
			if n := len(d.Msg.ID); d.Msg.ID[n-1] == '3' && tries[d.Msg.ID] == 1 {
				return fmt.Errorf("%w: first try of %s", drain.ErrDelivery, d.Msg.ID)
			}
			return nil
		}
		for k := range 4 {
			for j := range 8 {
				r.admit(t, fmt.Sprint("k", k), fmt.Sprintf("k%d-%d", k, j))
			}
		}
		r.until(r.clock.Now().Add(time.Minute))
		if st := r.d.Stats(); st.Delivered != 32 || st.Failed != 4 || st.Queued != 0 || st.InFlight != 0 {
			t.Errorf("key %d: Stats() = %+v, want 32 delivered, 4 failed, none left", key, st)
		}
		return r.log
	}
	steps := run(1)
	if flights := run(3); !slices.Equal(flights, steps) {
		t.Errorf("with Key 3, driven:\n%q\nwith Key 1:\n%q", flights, steps)
	}
}

// A downstream that asks a key with Key 2 to pause pauses the whole key:
// nothing of it starts before the pause ends, and the job it refused goes
// first then.
func TestConcurrencyPauseHoldsKey(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			pace := drain.Pace{Interval: 10 * time.Millisecond, Concurrency: drain.Concurrency{Key: 2}}
			r := newMemRig(t, 100, pace, drain.Config{})
			l := newFlightLog(r, 50*time.Millisecond)
			l.fail = func(d *drain.Delivery) error {
				if d.Msg.ID == "k-2" && d.Msg.Attempt == 1 {
					return &drain.RetryAfterError{After: time.Second, Cause: "busy"}
				}
				return nil
			}
			ids := r.admit("k", 6)
			r.d.Start(t.Context())
			r.sink.wait(t, 6, time.Minute)
			ss := l.of("k")
			refused := slices.IndexFunc(ss, func(s flightStart) bool { return s.id == "k-2" })
			if refused < 0 || ss[refused].attempt != 1 {
				t.Fatalf("k-2 was never refused: %+v", ss)
			}
			answered := ss[refused].at.Add(50 * time.Millisecond) // the refusal came back
			var after []string                                    // the starts after the refusal, in order
			for _, s := range ss {
				switch {
				case !s.at.After(answered):
				case s.at.Before(answered.Add(time.Second)):
					t.Errorf("%s started %v after the refusal, during the key's 1 s pause", s.id, s.at.Sub(answered))
				default:
					after = append(after, s.id)
				}
			}
			if len(after) == 0 || after[0] != "k-2" {
				t.Errorf("after the pause %v started, want k-2 first", after)
			}
			if got := deliveredIDs(r.sink.deliveries()); !slices.Equal(got, ids) {
				t.Errorf("delivered %v, want each of %v once", got, ids)
			}
			checkSettled(t, r)
		})
	})
}

// Deliveries in the air when the Drainer stops delivering (SetActive
// false) land; the jobs that failed meanwhile are read again on
// activation, and every job is delivered.
func TestConcurrencyFlightsAcrossDeactivation(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			pace := drain.Pace{Interval: 10 * time.Millisecond, Concurrency: drain.Concurrency{Key: 3},
				Retry: drain.Retry{Backoff: 50 * time.Millisecond}}
			r := newMemRig(t, 100, pace, drain.Config{Jitter: func() float64 { return 0 }})
			l := newFlightLog(r, 200*time.Millisecond)
			var failed atomic.Bool
			l.fail = func(d *drain.Delivery) error { // k-1's first call only: its attempts are not kept across activations
				if d.Msg.ID == "k-1" && failed.CompareAndSwap(false, true) {
					return fmt.Errorf("%w: consumer error", drain.ErrDelivery)
				}
				return nil
			}
			ids := r.admit("k", 10)
			r.d.Start(t.Context())
			elapse(50 * time.Millisecond) // k-0, k-1 and k-2 in the air
			r.d.SetActive(false)
			elapse(time.Second)
			if st := r.d.Stats(); st.InFlight != 0 || st.Delivered != 2 || st.Failed != 1 {
				t.Errorf("Stats() while inactive = %+v, want the three in the air landed: 2 delivered, 1 failed", st)
			}
			r.d.SetActive(true)
			r.sink.wait(t, 10, time.Minute)
			if got := deliveredIDs(r.sink.deliveries()); !slices.Equal(got, ids) {
				t.Errorf("delivered %v, want each of %v once", got, ids)
			}
			checkSettled(t, r)
			if n := len(l.log()); n != 11 {
				t.Errorf("%d attempts, want 11 (k-1 twice)", n)
			}
		})
	})
}
