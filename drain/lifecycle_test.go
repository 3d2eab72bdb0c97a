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
)

// A drainer that takes a policy over (passive, then active) delivers every
// job, in order, whether it was stored before it started or while another
// drainer was delivering; while passive it keeps its keys' depths right
// from the queue's counts.
func TestHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		interval := 20 * time.Millisecond
		r := newMemRig(t, 100, drain.Pace{Interval: interval}, drain.Config{})
		b := drain.New(r.q, r.sink, drain.Pace{Interval: interval}, drain.Config{Passive: true})
		t.Cleanup(b.Stop)
		want := map[string][]string{}
		for i := range 30 { // three keys, interleaved
			k := fmt.Sprint("k", i%3)
			want[k] = append(want[k], r.admit(k, 1)...)
		}
		b.Start(t.Context())
		r.d.Start(t.Context()) // a drains first
		r.sink.wait(t, 9, time.Minute)
		r.d.SetActive(false)
		synctest.Wait() // a's steps in flight end

		// b counts every job it saw stored, then learns from the queue's
		// counts (every two seconds) which ones a removed.
		elapse(2*time.Second + time.Millisecond)
		synctest.Wait()
		depths, _, _ := r.q.TokenDepths(t.Context())
		for k := range want {
			if got := b.Key(k, time.Now()).Queued; got != int64(depths[k]) {
				t.Errorf("passive b: Key(%s).Queued = %d, want %d as stored", k, got, depths[k])
			}
		}

		b.SetActive(true)
		r.sink.wait(t, 30, time.Minute)
		elapse(time.Second)
		synctest.Wait()
		ds := r.sink.deliveries()
		uniq := unique(ds)
		if len(uniq) != 30 {
			t.Fatalf("%d jobs delivered, want 30", len(uniq))
		}
		// a stopped with each key's last delivery still holding its slot:
		// b delivers those again, once per key at most.
		if dups := len(ds) - len(uniq); dups > 3 {
			t.Errorf("%d duplicates across the handover, want at most one per key", dups)
		}
		for k, kd := range byKey(uniq) {
			checkFIFO(t, k, kd, want[k])
		}
		if depths, _, _ := r.q.TokenDepths(t.Context()); len(depths) != 0 {
			t.Errorf("queue holds %v after the handover, want nothing", depths)
		}
	})
}

// Drain finishes what is in flight, frees the slots of delivered jobs and
// leaves the rest queued; it is idempotent, and nothing is delivered after.
func TestDrainLeavesQueuedJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newMemRig(t, 100, drain.Pace{Interval: 100 * time.Millisecond}, drain.Config{})
		r.admit("k", 50)
		r.d.Start(t.Context())
		r.sink.wait(t, 5, time.Minute)
		for range 2 {
			if err := r.d.Drain(t.Context()); err != nil {
				t.Fatalf("Drain = %v", err)
			}
		}
		elapse(time.Minute)
		r.d.Stop()
		n := len(r.sink.deliveries())
		depths, err := r.q.Depths(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n != 5 || depths["k"] != 45 {
			t.Errorf("after Drain: %d delivered, %d queued; want 5 delivered and their slots freed, 45 queued", n, depths["k"])
		}
	})
}

// Drain returns ctx's error when a step does not end in time, and still
// frees the slots of delivered jobs.
func TestDrainGivesUpWithCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newMemRig(t, 10, drain.Pace{Interval: 10 * time.Millisecond}, drain.Config{})
		release := make(chan struct{})
		r.sink.setFail(func(d *drain.Delivery) error {
			if d.Msg.ID == "k-1" {
				<-release // a downstream that hangs
			}
			return nil
		})
		r.admit("k", 3)
		r.d.Start(t.Context())
		r.sink.wait(t, 1, time.Minute)
		elapse(15 * time.Millisecond) // k-1 was due at 10 ms, and hangs
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := r.d.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Drain with a hung delivery = %v, want %v", err, context.DeadlineExceeded)
		}
		close(release)
		if depths, _ := r.q.Depths(t.Context()); depths["k"] != 2 {
			t.Errorf("after Drain: %d queued, want 2 (k-0's slot freed)", depths["k"])
		}
	})
}

// SetPace re-plans the slot each key waits for at once: from the key's
// last delivery, at the new interval, raised or lowered.
func TestSetPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newMemRig(t, 10, drain.Pace{Interval: 100 * time.Millisecond}, drain.Config{})
		r.admit("k", 6)
		start := time.Now()
		r.d.Start(t.Context())
		r.sink.wait(t, 3, time.Minute) // at 0, 100, 200 ms; k-3 was due at 300 ms
		r.d.SetPace(drain.Pace{Interval: 10 * time.Millisecond})
		r.sink.wait(t, 5, time.Minute) // at 210 and 220 ms: 10 ms after the last
		r.d.SetPace(drain.Pace{Interval: time.Second})
		ds := r.sink.wait(t, 6, time.Minute)
		var got []time.Duration
		for _, d := range ds {
			got = append(got, d.at.Sub(start))
		}
		want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 210 * time.Millisecond, 220 * time.Millisecond, 1220 * time.Millisecond}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("deliveries at %v, want %v", got, want)
		}
	})
}

// Under a total cap, SetPace re-plans the slots reserved under it too.
func TestSetPaceTotal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newMemRig(t, 10, drain.Pace{Interval: time.Millisecond, Total: time.Minute}, drain.Config{})
		for _, k := range []string{"a", "b", "c"} {
			r.admit(k, 1)
		}
		start := time.Now()
		r.d.Start(t.Context())
		r.sink.wait(t, 1, time.Minute) // a at once; b reserved at 1 m, c at 2 m
		elapse(time.Second)
		r.d.SetPace(drain.Pace{Interval: time.Millisecond, Total: 100 * time.Millisecond})
		ds := r.sink.wait(t, 3, time.Minute)
		for i, d := range ds[1:] {
			if at := d.at.Sub(start); at > 1200*time.Millisecond {
				t.Errorf("delivery %d at %v after the total cap was raised at 1 s, want within 200 ms", i+1, at)
			}
		}
		if n := maxInWindow(ds[1:], 100*time.Millisecond); n > 1 {
			t.Errorf("%d deliveries within 100 ms under a total of 10/s", n)
		}
	})
}

// A passive Drainer delivers nothing but counts what is stored.
func TestPassiveDeliversNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newMemRig(t, 10, drain.Pace{Interval: 10 * time.Millisecond}, drain.Config{Passive: true})
		r.d.Start(t.Context())
		r.admit("k", 4)
		elapse(time.Second)
		synctest.Wait()
		if n := len(r.sink.tries()); n != 0 {
			t.Errorf("passive drainer made %d deliveries, want none", n)
		}
		if st := r.d.Key("k", time.Now()); st.Queued != 4 || st.Waiting != 4 {
			t.Errorf("Key(k) = %+v, want 4 queued, 4 waiting", st)
		}
	})
}

// When a job is handed to the sink, the job of its key delivered before is
// no longer stored: a drainer killed at any moment leaves at most one
// delivered job per key in the queue (the one in flight), which is all a
// take-over delivers again.
func TestOneDeliveredJobStoredPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newMemRig(t, 100, drain.Pace{Interval: 10 * time.Millisecond}, drain.Config{Workers: 4})
		var (
			mu     sync.Mutex
			prev   = map[string]uint64{} // key token → seq of its last delivery
			stored []string
		)
		r.sink.setFail(func(d *drain.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			if seq, ok := prev[d.Token]; ok {
				if _, err := r.q.Get(t.Context(), d.Token, seq); err == nil {
					stored = append(stored, fmt.Sprintf("%s (seq %d) while delivering seq %d", d.Msg.Key, seq, d.Msg.Seq))
				}
			}
			prev[d.Token] = d.Msg.Seq
			return nil
		})
		for i := range 5 {
			r.admit(fmt.Sprint("k", i), 20)
		}
		r.d.Start(t.Context())
		r.sink.wait(t, 100, time.Minute)
		if len(stored) > 0 {
			t.Errorf("%d deliveries while the key's previous delivered job was still stored, e.g. %v", len(stored), stored[:min(3, len(stored))])
		}
	})
}
