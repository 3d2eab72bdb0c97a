package drain_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// Stepped-aside jobs across the life of drainers: nothing is lost when a
// drainer stops and starts delivering, or another takes over; and attempts
// made before a take-over count (Config.Resume).

// downFor makes r's sink fail the jobs of ids until the returned func is
// called.
func downFor(r *memRig, ids ...string) (up func()) {
	var mu sync.Mutex
	down := true
	r.sink.setFail(func(d *drain.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if down && d.Msg.ID == id {
				return errDown
			}
		}
		return nil
	})
	return func() {
		mu.Lock()
		down = false
		mu.Unlock()
	}
}

// checkAllDelivered fails the test unless every job in want was delivered
// at least once, and the queue holds nothing.
func checkAllDelivered(t *testing.T, r *memRig, want []string) {
	t.Helper()
	got := map[string]bool{}
	for _, d := range r.sink.deliveries() {
		got[d.id] = true
	}
	for _, id := range want {
		if !got[id] {
			t.Errorf("job %s never delivered", id)
		}
	}
	if depths, _, _ := r.q.TokenDepths(t.Context()); len(depths) != 0 {
		t.Errorf("queue holds %v, want nothing", depths)
	}
}

// A drainer that stops and starts delivering (SetActive) with failed jobs
// stepped aside reads them again: every job is delivered in the end.
func TestBudgetNothingLostAcrossSetActive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newMemRig(t, 50, drain.Pace{Interval: 10 * time.Millisecond, Retry: drain.Retry{
			Backoff: 30 * time.Millisecond, MaxBackoff: 30 * time.Millisecond, Budget: 0.2}}, drain.Config{})
		var ids []string
		for _, k := range []string{"a", "b"} {
			ids = append(ids, r.admit(k, 30)...)
		}
		up := downFor(r, "a-0", "a-3", "a-4", "b-1", "b-7")
		r.d.Start(t.Context())
		for range 4 {
			elapse(95 * time.Millisecond)
			synctest.Wait()
			if n := r.d.Stats().SteppedAside; n == 0 {
				t.Errorf("no job stepped aside before SetActive(false)")
			}
			r.d.SetActive(false)
			elapse(50 * time.Millisecond)
			synctest.Wait()
			r.d.SetActive(true)
		}
		up()
		elapse(10 * time.Second)
		synctest.Wait()
		checkAllDelivered(t, r, ids)
		if st := r.d.Stats(); st.Queued != 0 || st.SteppedAside != 0 || st.Keys != 0 {
			t.Errorf("Stats() = %+v, want nothing queued or aside", st)
		}
	})
}

// A drainer that takes over from one with failed jobs stepped aside, after
// its passive count of the key trimmed their sequences from its list, still
// finds them stored and delivers them; its count of the key ends right.
func TestBudgetTakeOverFindsSteppedAsideJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pace := drain.Pace{Interval: 10 * time.Millisecond, Retry: drain.Retry{
			Backoff: time.Hour, MaxBackoff: time.Hour, Budget: 0.2}}
		r := newMemRig(t, 50, pace, drain.Config{})
		b := drain.New(r.q, r.sink, pace, drain.Config{Passive: true})
		t.Cleanup(b.Stop)
		ids := r.admit("k", 40)
		up := downFor(r, "k-0", "k-3", "k-5")
		b.Start(t.Context())
		r.d.Start(t.Context())
		elapse(time.Second) // a delivers all but the three, which wait an hour
		synctest.Wait()
		if st := r.d.Stats(); st.SteppedAside != 3 || st.Delivered != 37 {
			t.Fatalf("a: Stats() = %+v, want 37 delivered, 3 stepped aside", st)
		}
		elapse(2 * time.Second) // b counts the key from the queue: 3 jobs
		synctest.Wait()
		if ks := b.Key("k", time.Now()); ks.Queued != 3 {
			t.Errorf("passive b: Key(k).Queued = %d, want 3", ks.Queued)
		}
		r.d.SetActive(false)
		up()
		b.SetActive(true)
		elapse(time.Second)
		synctest.Wait()
		checkAllDelivered(t, r, ids)
		if ks := b.Key("k", time.Now()); ks.Queued != 0 {
			t.Errorf("b: Key(k).Queued = %d after delivering everything, want 0", ks.Queued)
		}
		if st := b.Stats(); st.Queued != 0 || st.Delivered != 3 {
			t.Errorf("b: Stats() = %+v, want 3 delivered, nothing queued", st)
		}
	})
}

// Resume tells a drainer how many attempts a job stored before its
// activation had: they count toward its attempts and its Attempt. It is
// asked only about the first heads of each key stored before activation.
func TestResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu    sync.Mutex
			asked []string
			ev    events
		)
		before := map[string]int{"a-0": 2, "b-0": 5, "c-0": 1}
		r := newMemRig(t, 50, drain.Pace{Interval: 10 * time.Millisecond, Retry: drain.Retry{
			Attempts: 5, Budget: 0.2}}, drain.Config{
			DeadLetter: ev.deadLetter,
			Resume: func(_ context.Context, m *queue.Msg) drain.Resumed {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, m.ID)
				if m.ID == "b-0" { // what its 5 attempts met, kept elsewhere
					return drain.Resumed{Attempts: 5, Failures: 5, History: []string{"t1 attempt 1: refused", "t5 attempt 5: refused"}}
				}
				return drain.Resumed{Attempts: before[m.ID], Failures: before[m.ID]}
			},
		})
		r.admit("a", 12)
		r.admit("b", 1)
		r.d.Start(t.Context())
		elapse(50 * time.Millisecond)
		r.admit("a", 1) // a-12, stored after the activation
		r.sink.wait(t, 13, time.Minute)
		synctest.Wait()
		attempt := map[string]int{}
		for _, d := range r.sink.deliveries() {
			attempt[d.id] = d.attempt
		}
		if attempt["a-0"] != 3 || attempt["a-1"] != 1 {
			t.Errorf("a-0 delivered with Attempt %d, a-1 with %d; want 3 (two failed before), 1", attempt["a-0"], attempt["a-1"])
		}
		// Its history goes on from the attempts before (a tour's dead
		// letter after a kill -9 began "resumed after 2 failed attempts",
		// the earlier attempts' errors lost).
		if len(ev.letters) != 1 || ev.letters[0].id != "b-0" || ev.letters[0].reason != drain.ReasonDelivery ||
			!strings.HasPrefix(fmt.Sprint(ev.letters[0].history), "[t1 attempt 1: refused t5 attempt 5: refused ") ||
			!strings.Contains(fmt.Sprint(ev.letters[0].history), "resumed after 5 failed attempts") {
			t.Errorf("dead letters %+v, want b-0's (out of attempts before the activation), its earlier attempts first, then saying so", ev.letters)
		}
		if _, tried := attempt["b-0"]; tried {
			t.Errorf("b-0 was delivered, want it dead-lettered without another attempt")
		}
		// a's first heads (maxAside + 2 = 10) and b's, never a-10 on, nor
		// a-12, stored after the activation.
		mu.Lock()
		slices.Sort(asked)
		got := fmt.Sprint(asked)
		asked = nil
		mu.Unlock()
		want := "[a-0 a-1 a-2 a-3 a-4 a-5 a-6 a-7 a-8 a-9 b-0]"
		if got != want {
			t.Errorf("Resume asked about %s, want %s", got, want)
		}

		// A job stored while passive was stored before the next activation.
		r.d.SetActive(false)
		r.admit("c", 1)
		r.d.SetActive(true)
		r.sink.wait(t, 14, time.Minute)
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(asked) != "[c-0]" {
			t.Errorf("after SetActive(true) Resume asked about %v, want [c-0]", asked)
		}
	})
}
