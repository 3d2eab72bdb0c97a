package drain_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// The scheduler on a MemQueue, started (scheduler goroutine and workers),
// in a synctest bubble: time is virtual and exact, so deliveries are checked
// against their slots to the nanosecond, and no test waits on the wall clock.

// checkSlots fails the test unless ds start at start and follow one another
// every interval, exactly.
func checkSlots(t *testing.T, what string, ds []delivery, start time.Time, interval time.Duration) {
	t.Helper()
	for i, d := range ds {
		if want := start.Add(time.Duration(i) * interval); !d.at.Equal(want) {
			t.Errorf("%s: delivery %d (%s) at %v, want %v", what, i, d.id, d.at.Sub(start), want.Sub(start))
			return
		}
	}
}

// checkWindows fails the test if more than ⌈T/interval⌉+1 deliveries start
// in any window T, for windows of a few lengths.
func checkWindows(t *testing.T, what string, ds []delivery, interval time.Duration) {
	t.Helper()
	for _, w := range []time.Duration{interval / 2, interval, 3*interval + interval/3, 10 * interval, time.Second} {
		limit := int((w+interval-1)/interval) + 1
		if got := maxInWindow(ds, w); got > limit {
			t.Errorf("%s: %d deliveries in a window of %v, want at most %d", what, got, w, limit)
		}
	}
}

func TestOneKeyFIFOAtRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		interval := 20 * time.Millisecond // 50/s
		r := newMemRig(t, 500, drain.Pace{Interval: interval}, drain.Config{})
		ids := r.admit("k", 500)
		start := time.Now()
		r.d.Start(t.Context())
		ds := r.sink.wait(t, 500, time.Minute)
		checkFIFO(t, "k", ds, ids)
		// Under backlog the achieved rate is the configured one, exactly.
		checkSlots(t, "k", ds, start, interval)
		checkWindows(t, "k", ds, interval)
	})
}

func TestManyKeysSideBySide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		interval := 100 * time.Millisecond // 10/s
		r := newMemRig(t, 20, drain.Pace{Interval: interval}, drain.Config{})
		want := map[string][]string{}
		for i := range 100 {
			k := fmt.Sprint("key", i)
			want[k] = r.admit(k, 20)
		}
		start := time.Now()
		r.d.Start(t.Context())
		ds := r.sink.wait(t, 2000, time.Minute)
		for k, kd := range byKey(ds) {
			checkFIFO(t, k, kd, want[k])
			checkSlots(t, k, kd, start, interval)
		}
		elapse(interval) // the last slots are held for an interval
		synctest.Wait()
		if st := r.d.Stats(); st.Delivered != 2000 || st.Queued != 0 || st.Keys != 0 {
			t.Errorf("Stats() = %+v, want 2000 delivered, 0 queued, no keys", st)
		}
	})
}

// Under a total cap every delivery takes the next slot of the policy's
// grid, and keys take those slots in turn.
func TestTotalCapSharedFairly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		total := 25 * time.Millisecond // 40/s over all keys, 20/s per key
		r := newMemRig(t, 50, drain.Pace{Interval: 50 * time.Millisecond, Total: total}, drain.Config{})
		for i := range 8 {
			r.admit(fmt.Sprint("k", i), 20)
		}
		start := time.Now()
		r.d.Start(t.Context())
		ds := r.sink.wait(t, 160, time.Minute)
		checkSlots(t, "all keys", ds, start, total)
		checkWindows(t, "all keys", ds, total)
		for k, kd := range byKey(ds[:120]) {
			if len(kd) != 15 {
				t.Errorf("key %q got %d of the first 120 deliveries, want its share, 15", k, len(kd))
			}
		}
	})
}

// A burst against a draining key sees exactly the queue size free: a
// delivered job keeps its slot until its outflow slot ends.
func TestBurstSeesQueueSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		interval := 50 * time.Millisecond
		r := newMemRig(t, 10, drain.Pace{Interval: interval}, drain.Config{})
		r.d.Start(t.Context())
		var (
			mu     sync.Mutex
			stored []string
			full   int
			wg     sync.WaitGroup
		)
		start := time.Now()
		for i := range 50 {
			wg.Go(func() {
				id := fmt.Sprint("b", i)
				_, err := r.q.Admit(context.Background(), queue.Job{ID: id, Key: "k"})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					stored = append(stored, id)
				case errors.Is(err, queue.ErrFull):
					full++
				default:
					t.Errorf("Admit = %v", err)
				}
			})
		}
		wg.Wait()
		if len(stored) != 10 || full != 40 {
			t.Fatalf("burst of 50: %d stored, %d full; want 10, 40", len(stored), full)
		}
		ds := r.sink.wait(t, 10, time.Minute)
		checkSlots(t, "k", ds, start, interval)
		// Right after the first delivery's slot ends, there is room for one.
		if _, err := r.q.Admit(context.Background(), queue.Job{ID: "late", Key: "k"}); err != nil {
			t.Errorf("Admit after the burst drained = %v, want room", err)
		}
	})
}

// Retries back off exponentially, with full jitter between the base and the
// doubled ceiling; the jitter is injected.
func TestBackoffJitter(t *testing.T) {
	const (
		base    = 100 * time.Millisecond
		ceiling = 400 * time.Millisecond
	)
	// bound is the largest pause after n failures: base doubling, capped.
	bound := func(n int) time.Duration { return min(base<<(n-1), ceiling) }
	tests := []struct {
		name   string
		jitter func() float64
		want   func(n int) (lo, hi time.Duration) // the pause after n failures
	}{
		{"none", func() float64 { return 0 }, func(int) (time.Duration, time.Duration) { return base, base }},
		{"most", func() float64 { return 1 - 1e-9 }, func(n int) (time.Duration, time.Duration) {
			return bound(n) - time.Microsecond, bound(n)
		}},
		{"random", nil, func(n int) (time.Duration, time.Duration) { return base, bound(n) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newMemRig(t, 10, drain.Pace{Interval: 10 * time.Millisecond,
					Retry: drain.Retry{Backoff: base, MaxBackoff: ceiling}}, drain.Config{Jitter: tt.jitter})
				const failures = 6
				r.sink.setFail(func(d *drain.Delivery) error {
					if d.Msg.Attempt <= failures {
						return fmt.Errorf("%w: down", drain.ErrDelivery)
					}
					return nil
				})
				r.admit("k", 1)
				r.d.Start(t.Context())
				r.sink.wait(t, 1, time.Hour)
				tries := r.sink.tries()
				if len(tries) != failures+1 {
					t.Fatalf("%d attempts, want %d", len(tries), failures+1)
				}
				for n := 1; n <= failures; n++ {
					if a := tries[n].attempt; a != n+1 {
						t.Errorf("attempt %d carries Attempt %d", n+1, a)
					}
					lo, hi := tt.want(n)
					if gap := tries[n].at.Sub(tries[n-1].at); gap < lo || gap > hi {
						t.Errorf("pause after %d failures = %v, want within [%v, %v]", n, gap, lo, hi)
					}
				}
			})
		})
	}
}

// A *RetryAfterError pauses its key for the time asked, and only that key;
// the pause is not a failed attempt that counts.
func TestRetryAfterPausesOneKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		interval := 100 * time.Millisecond
		var dead []string
		r := newMemRig(t, 10, drain.Pace{Interval: interval, Retry: drain.Retry{Attempts: 1}}, drain.Config{
			DeadLetter: func(_ context.Context, m *queue.Msg, _ string, _ []string) error {
				dead = append(dead, m.ID)
				return nil
			},
		})
		r.sink.setFail(func(d *drain.Delivery) error {
			if d.Msg.ID == "a-0" && d.Msg.Attempt == 1 {
				return &drain.RetryAfterError{After: time.Second, Cause: "429"}
			}
			return nil
		})
		a, b := r.admit("a", 5), r.admit("b", 5)
		start := time.Now()
		r.d.Start(t.Context())
		ds := r.sink.wait(t, 10, time.Minute)
		got := byKey(ds)
		checkFIFO(t, "a", got["a"], a)
		checkFIFO(t, "b", got["b"], b)
		checkSlots(t, "b", got["b"], start, interval)
		checkSlots(t, "a", got["a"], start.Add(time.Second), interval)
		if len(dead) != 0 {
			t.Errorf("dead-lettered %v: a pause counted as a failed attempt", dead)
		}
		if st := r.d.Stats(); st.Failed != 1 {
			t.Errorf("Stats().Failed = %d, want 1", st.Failed)
		}
	})
}

// Started, with the worker pool busy: 1,000 keys at 1/s for 30 virtual
// seconds, topped up from OnDeliver; every key gets exactly its 30
// deliveries, each in its slot. (TestAdvanceThousandKeysThousandSeconds
// runs the same scheduler driven, for 1,000 seconds.)
func TestManyKeysStarted(t *testing.T) {
	const (
		keys    = 1000
		seconds = 30
	)
	synctest.Test(t, func(t *testing.T) {
		var (
			mu     sync.Mutex
			counts = map[string]int{}
			off    int
			q      *drain.MemQueue
		)
		start := time.Now()
		r := newMemRig(t, 4, drain.Pace{Interval: time.Second}, drain.Config{OnDeliver: func(ev drain.Event) {
			mu.Lock()
			if !ev.Started.Equal(start.Add(time.Duration(counts[ev.Key]) * time.Second)) {
				off++
			}
			counts[ev.Key]++
			mu.Unlock()
			if _, err := q.Admit(context.Background(), queue.Job{Key: ev.Key}); err != nil {
				t.Errorf("top-up of %s: %v", ev.Key, err)
			}
		}})
		q = r.q
		for i := range keys {
			r.admit(fmt.Sprint("k", i), 2)
		}
		r.d.Start(t.Context())
		elapse(seconds*time.Second - time.Nanosecond)
		r.d.Stop()
		mu.Lock()
		defer mu.Unlock()
		if len(counts) != keys || off != 0 {
			t.Errorf("%d keys delivered, %d deliveries off their slot; want %d, 0", len(counts), off, keys)
		}
		for k, n := range counts {
			if n != seconds {
				t.Errorf("key %s: %d deliveries in %d s at 1/s, want %d", k, n, seconds, seconds)
			}
		}
	})
}
