package drain_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// A Drainer driven by Advance on a virtual clock, as a traffic replay runs
// it: one goroutine, no timers, no wall time.

// virtualClock is a Clock that reads the time the replay set. A driven
// Drainer asks it for no timer.
type virtualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *virtualClock) NewTimer(time.Duration) drain.Timer {
	panic("a driven Drainer asked for a timer")
}

// replay is a MemQueue and a driven Drainer on a virtual clock.
type replay struct {
	clock *virtualClock
	q     *drain.MemQueue
	d     *drain.Drainer
	log   []string // "<at> <id>" per delivery
	quiet bool     // log nothing
	fail  func(d *drain.Delivery) error
}

func newReplay(tb testing.TB, size int, pace drain.Pace, cfg drain.Config) *replay {
	tb.Helper()
	r := &replay{clock: &virtualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	var err error
	if r.q, err = drain.NewMemQueue("p", size, drain.MemQueueConfig{Clock: r.clock}); err != nil {
		tb.Fatal(err)
	}
	cfg.Clock = r.clock
	r.d = drain.New(r.q, r, pace, cfg)
	tb.Cleanup(r.d.Stop)
	r.d.Advance(context.Background(), r.clock.Now()) // starts the watch
	return r
}

// Deliver makes r a Sink that logs every delivery at the virtual time.
func (r *replay) Deliver(_ context.Context, d *drain.Delivery) error {
	if r.fail != nil {
		if err := r.fail(d); err != nil {
			return err
		}
	}
	if !r.quiet {
		r.log = append(r.log, fmt.Sprintf("%v %s", r.clock.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), d.Msg.ID))
	}
	return nil
}

// until runs every step due up to end, moving the clock from one to the
// next, and leaves the clock at end.
func (r *replay) until(end time.Time) {
	for {
		next, ok := r.d.Advance(context.Background(), r.clock.Now())
		if !ok || next.After(end) {
			r.clock.set(end)
			return
		}
		r.clock.set(next)
	}
}

func (r *replay) admit(tb testing.TB, key, id string) {
	tb.Helper()
	if _, err := r.q.Admit(context.Background(), queue.Job{ID: id, Key: key}); err != nil {
		tb.Fatalf("Admit(%s, %s) = %v", key, id, err)
	}
}

func TestAdvance(t *testing.T) {
	run := func() []string {
		r := newReplay(t, 5, drain.Pace{Interval: time.Second}, drain.Config{})
		t0 := r.clock.Now()
		at := func(d time.Duration) time.Time { return t0.Add(d) }
		r.admit(t, "a", "a-0")
		// The drainer knows of the job as soon as Admit returned.
		if st := r.d.Key("a", t0); st.Queued != 1 || st.Seen == 0 {
			t.Errorf("Key(a) right after Admit = %+v, want 1 queued, seen", st)
		}
		r.admit(t, "a", "a-1")
		r.admit(t, "a", "a-2")
		r.admit(t, "b", "b-0")
		r.until(at(500 * time.Millisecond))
		r.admit(t, "b", "b-1") // b's next slot is at 1 s
		r.until(at(5 * time.Second))
		r.admit(t, "a", "a-3") // a has been idle since 2 s: at once
		next, ok := r.d.Advance(context.Background(), at(5*time.Second))
		if free := at(6*time.Second - 10*time.Millisecond); !ok || !next.Equal(free) {
			t.Errorf("Advance at 5 s = %v, %v; want a's slot to free at 5.99 s, just before the next slot", next.Sub(t0), ok)
		}
		r.until(at(time.Minute))
		if next, ok := r.d.Advance(context.Background(), at(time.Minute)); ok {
			t.Errorf("Advance with nothing queued = %v, true; want false", next.Sub(t0))
		}
		if st := r.d.Stats(); st.Delivered != 6 || st.Queued != 0 || st.Keys != 0 {
			t.Errorf("Stats() = %+v, want 6 delivered, nothing queued", st)
		}
		return r.log
	}
	got := run()
	want := []string{"0s a-0", "0s b-0", "1s a-1", "1s b-1", "2s a-2", "5s a-3"}
	if !slices.Equal(got, want) {
		t.Errorf("deliveries %q, want %q", got, want)
	}
	if again := run(); !slices.Equal(again, got) {
		t.Errorf("a second replay delivered %q, the first %q: not deterministic", again, got)
	}
}

// A driven Drainer does nothing once started, and a started one cannot be
// driven.
func TestAdvanceOnlyWhenDriven(t *testing.T) {
	q, err := drain.NewMemQueue("p", 5, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	d := drain.New(q, newRecorder(), drain.Pace{}, drain.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.Start(ctx)
	defer d.Stop()
	if _, ok := d.Advance(ctx, time.Now()); ok {
		t.Errorf("Advance on a started Drainer = ok, want false")
	}
}

// 1,000 keys drain for 1,000 virtual seconds at 1/s each, topped up from
// OnDeliver as the slots free, each key starting in its own millisecond:
// every key gets exactly the 1,000 deliveries its rate allows, each in its
// slot.
func TestAdvanceThousandKeysThousandSeconds(t *testing.T) {
	const (
		keys    = 1000
		seconds = 1000
	)
	var (
		r       *replay
		late    int
		counts  = make([]int, keys)
		started = time.Now()
	)
	var t0 time.Time
	sink := drain.Config{OnDeliver: func(ev drain.Event) {
		i, _ := strconv.Atoi(ev.Key[1:])
		want := t0.Add(time.Duration(i)*time.Millisecond + time.Duration(counts[i])*time.Second)
		if !ev.Started.Equal(want) {
			late++
		}
		counts[i]++
		r.admit(t, ev.Key, "") // keep the key's backlog
	}}
	// A key holds the job whose slot is still held, the one in delivery
	// (OnDeliver runs before the held slot is freed), one more, and the
	// one OnDeliver adds.
	r = newReplay(t, 4, drain.Pace{Interval: time.Second}, sink)
	r.quiet = true
	t0 = r.clock.Now()
	for i := range keys {
		r.until(t0.Add(time.Duration(i) * time.Millisecond))
		for range 2 {
			r.admit(t, fmt.Sprint("k", i), "")
		}
	}
	r.until(t0.Add(seconds*time.Second - time.Nanosecond))
	took := time.Since(started)
	for i, n := range counts {
		if n != seconds {
			t.Errorf("key k%d: %d deliveries in %d s at 1/s, want %d", i, n, seconds, seconds)
		}
	}
	if late > 0 {
		t.Errorf("%d deliveries off their slot", late)
	}
	t.Logf("%d keys × %d virtual seconds: %d deliveries in %v of wall time", keys, seconds, keys*seconds, took)
}

// BenchmarkAdvance measures a replay's cost: jobs admitted to a MemQueue
// and drained by a driven Drainer on a virtual clock, per second of wall
// time. Jobs arrive one per virtual millisecond, round robin over the keys,
// each key at the rate it drains (keys × 1 ms apart), as an hour of traffic
// of 3.6 M jobs over 10,000 keys does. One op is one job, admitted and
// delivered.
func BenchmarkAdvance(b *testing.B) {
	for _, keys := range []int{1000, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			r := newReplay(b, 10, drain.Pace{Interval: time.Duration(keys) * time.Millisecond}, drain.Config{})
			r.quiet = true
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprint("k", i)
			}
			t0 := r.clock.Now()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				r.until(t0.Add(time.Duration(i) * time.Millisecond))
				if _, err := r.q.Admit(ctx, queue.Job{Key: names[i%keys]}); err != nil {
					b.Fatalf("Admit #%d: %v", i, err)
				}
			}
			r.until(r.clock.Now().Add(time.Duration(keys) * time.Second))
			b.StopTimer()
			if st := r.d.Stats(); st.Delivered != uint64(b.N) || st.Queued != 0 {
				b.Fatalf("after the replay: %+v, want %d delivered, none queued", st, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkAdvanceRetries is BenchmarkAdvance with a downstream that fails
// the first attempt of every seventh job stored, retried after 100 ms,
// with the retry budget (the failed job steps aside) and without (it
// blocks its key): the cost of the retry bookkeeping. Jobs arrive at half
// the keys' rate, leaving room for the retries. One op is one job,
// admitted and delivered.
func BenchmarkAdvanceRetries(b *testing.B) {
	const keys = 1000
	for _, budget := range []float64{0, 0.2} {
		b.Run(fmt.Sprintf("budget=%v", budget), func(b *testing.B) {
			r := newReplay(b, 10, drain.Pace{Interval: keys * time.Millisecond, Retry: drain.Retry{
				Backoff: 100 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Budget: budget}},
				drain.Config{Jitter: func() float64 { return 0 }})
			r.quiet = true
			r.fail = func(d *drain.Delivery) error {
				if d.Msg.Seq%7 == 0 && d.Msg.Attempt == 1 {
					return drain.ErrDelivery
				}
				return nil
			}
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprint("k", i)
			}
			t0 := r.clock.Now()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				r.until(t0.Add(time.Duration(i) * 2 * time.Millisecond))
				if _, err := r.q.Admit(ctx, queue.Job{Key: names[i%keys]}); err != nil {
					b.Fatalf("Admit #%d: %v", i, err)
				}
			}
			r.until(r.clock.Now().Add(keys * time.Second))
			b.StopTimer()
			if st := r.d.Stats(); st.Delivered != uint64(b.N) || st.Queued != 0 || b.N >= 7 && st.Failed == 0 {
				b.Fatalf("after the replay: %+v, want %d delivered, none queued, some failed", st, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
