package drain_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// letter is one call of Config.DeadLetter.
type letter struct {
	id, reason string
	history    []string
	at         time.Time
}

// events records a Drainer's events and dead letters.
type events struct {
	mu      sync.Mutex
	all     []drain.Event
	letters []letter
}

func (e *events) onDeliver(ev drain.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) deadLetter(_ context.Context, m *queue.Msg, reason string, history []string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.letters = append(e.letters, letter{id: m.ID, reason: reason, history: history, at: time.Now()})
	return nil
}

// describe is an event in a few words: "k-0 failed", "k-0 dead (delivery)", "k-1 delivered".
func describe(ev drain.Event) string {
	switch {
	case ev.Reason != "":
		return ev.ID + " dead (" + ev.Reason + ")"
	case ev.Err != nil:
		return ev.ID + " failed"
	}
	return ev.ID + " delivered"
}

func TestDeadLetter(t *testing.T) {
	failing := func(d *drain.Delivery) error {
		if d.Msg.ID == "k-0" {
			return fmt.Errorf("%w: downstream says no", drain.ErrDelivery)
		}
		return nil
	}
	tests := []struct {
		name       string
		retry      drain.Retry
		fail       func(d *drain.Delivery) error
		wantReason string
		wantTries  []time.Duration // when k-0 was tried, from the start
	}{
		{
			name:       "sink gives up",
			retry:      drain.Retry{Attempts: 5},
			fail:       func(*drain.Delivery) error { return &drain.GiveUpError{Reason: "expired", Cause: "too old"} },
			wantReason: "expired",
			wantTries:  []time.Duration{0},
		},
		{
			name:       "attempts run out",
			retry:      drain.Retry{Attempts: 3, Backoff: 100 * time.Millisecond, MaxBackoff: time.Second},
			fail:       failing,
			wantReason: drain.ReasonDelivery,
			wantTries:  []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond},
		},
		{
			// At 200 ms the next try would come after the deadline: it
			// comes at the deadline, and finds it passed.
			name:       "deadline passes",
			retry:      drain.Retry{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second, Deadline: 250 * time.Millisecond},
			fail:       failing,
			wantReason: drain.ReasonDeadline,
			wantTries:  []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var ev events
				r := newMemRig(t, 10, drain.Pace{Interval: 10 * time.Millisecond, Retry: tt.retry}, drain.Config{
					OnDeliver:  ev.onDeliver,
					DeadLetter: ev.deadLetter,
					Jitter:     func() float64 { return 0 },
				})
				r.sink.setFail(func(d *drain.Delivery) error {
					if d.Msg.ID == "k-0" {
						return tt.fail(d)
					}
					return nil
				})
				start := time.Now()
				r.admit("k", 2)
				r.d.Start(t.Context())
				r.sink.wait(t, 1, time.Minute) // k-1, after k-0 is buried
				synctest.Wait()

				var tries []time.Duration
				for _, d := range r.sink.tries() {
					if d.id == "k-0" {
						tries = append(tries, d.at.Sub(start))
					}
				}
				if fmt.Sprint(tries) != fmt.Sprint(tt.wantTries) {
					t.Errorf("k-0 tried at %v, want %v", tries, tt.wantTries)
				}
				if len(ev.letters) != 1 {
					t.Fatalf("dead letters %+v, want k-0's", ev.letters)
				}
				l := ev.letters[0]
				if l.id != "k-0" || l.reason != tt.wantReason || len(l.history) != len(tt.wantTries) {
					t.Errorf("DeadLetter(%s, %q, %d history lines), want (k-0, %q, %d)", l.id, l.reason, len(l.history), tt.wantReason, len(tt.wantTries))
				}
				for i, h := range l.history {
					n := i + 1
					if tt.wantReason == "expired" {
						n = 0 // the attempt a *GiveUpError ends is not counted, and numbered so
					}
					if want := fmt.Sprintf(" attempt %d: ", n); !strings.Contains(h, want) || !strings.Contains(h, "delivery failed") {
						t.Errorf("history[%d] = %q, want %q and the error", i, h, want)
					}
				}
				var want []string
				for range tt.wantTries {
					want = append(want, "k-0 failed")
				}
				want = append(want, "k-0 dead ("+tt.wantReason+")", "k-1 delivered")
				var got []string
				for _, e := range ev.all {
					got = append(got, describe(e))
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("events %q, want %q", got, want)
				}
				elapse(time.Second) // k-1's slot is freed
				synctest.Wait()
				if st := r.d.Stats(); st.Dead != 1 || st.Delivered != 1 || st.Failed != uint64(len(tt.wantTries)) || st.Queued != 0 {
					t.Errorf("Stats() = %+v, want 1 dead, 1 delivered, %d failed, 0 queued", st, len(tt.wantTries))
				}
				if depths, _, _ := r.q.TokenDepths(t.Context()); len(depths) != 0 {
					t.Errorf("queue holds %v after the dead letter and the delivery, want nothing", depths)
				}
			})
		})
	}
}

// Per key, events come in order even with many workers: a job's failure is
// reported before its dead letter (its next step, due at once) can be.
func TestEventsInOrderPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu    sync.Mutex
			byKey = map[string][]string{}
		)
		r := newMemRig(t, 10, drain.Pace{Interval: time.Millisecond, Retry: drain.Retry{Attempts: 1}}, drain.Config{
			Workers: 8,
			OnDeliver: func(ev drain.Event) {
				if ev.Err != nil {
					runtime.Gosched() // give the job's dead letter every chance to overtake
				}
				mu.Lock()
				byKey[ev.Key] = append(byKey[ev.Key], describe(ev))
				mu.Unlock()
			},
			DeadLetter: func(context.Context, *queue.Msg, string, []string) error { return nil },
		})
		r.sink.setFail(func(*drain.Delivery) error { return fmt.Errorf("%w: no", drain.ErrDelivery) })
		for i := range 40 {
			r.admit(fmt.Sprint("k", i), 3)
		}
		r.d.Start(t.Context())
		elapse(time.Second)
		synctest.Wait()
		for i := range 40 {
			k := fmt.Sprint("k", i)
			want := fmt.Sprint([]string{k + "-0 failed", k + "-0 dead (delivery)", k + "-1 failed", k + "-1 dead (delivery)", k + "-2 failed", k + "-2 dead (delivery)"})
			if got := fmt.Sprint(byKey[k]); got != want {
				t.Errorf("key %s: events %s, want %s", k, got, want)
			}
		}
	})
}

// A callback may call the Drainer (Key, Stats, Active, SetPace) from
// inside: it runs without the Drainer's lock. So may the sink.
func TestCallbacksMayCallTheDrainer(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			var (
				d                 *drain.Drainer
				mu                sync.Mutex
				calls             int
				queuedAtDelivered []int64
			)
			pace := drain.Pace{Interval: 10 * time.Millisecond, Retry: drain.Retry{Attempts: 2, Backoff: 50 * time.Millisecond}}
			look := func(token string) drain.KeyStatus {
				st := d.Key(token, time.Now())
				_ = d.Stats()
				_ = d.Active()
				d.SetPace(pace)
				mu.Lock()
				calls++
				mu.Unlock()
				return st
			}
			q, err := drain.NewMemQueue("p", 10, drain.MemQueueConfig{})
			if err != nil {
				t.Fatal(err)
			}
			sink := newRecorder()
			sink.setFail(func(dl *drain.Delivery) error {
				look(dl.Token)
				if dl.Msg.ID == "k-1" { // fails twice: dead-lettered
					return fmt.Errorf("%w: no", drain.ErrDelivery)
				}
				return nil
			})
			d = drain.New(q, sink, pace, drain.Config{
				OnDeliver: func(ev drain.Event) {
					st := look("k")
					if ev.Err == nil && ev.Reason == "" {
						mu.Lock()
						queuedAtDelivered = append(queuedAtDelivered, st.Queued)
						mu.Unlock()
						if got := d.Stats().Delivered; got == 0 {
							t.Errorf("Stats().Delivered = 0 inside OnDeliver of a delivery")
						}
					}
				},
				DeadLetter: func(_ context.Context, m *queue.Msg, _ string, _ []string) error {
					look(m.Token)
					return nil
				},
			})
			t.Cleanup(d.Stop)
			for i := range 3 {
				if _, err := q.Admit(t.Context(), queue.Job{ID: fmt.Sprint("k-", i), Key: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			d.Start(t.Context())
			sink.wait(t, 2, time.Minute)
			synctest.Wait()
			// k-0 and k-2 delivered (with their own slots held), k-1 dead.
			if st := d.Stats(); st.Delivered != 2 || st.Dead != 1 || st.Failed != 2 {
				t.Errorf("Stats() = %+v, want 2 delivered, 1 dead, 2 failed", st)
			}
			if calls < 9 {
				t.Errorf("%d calls into the drainer from callbacks, want one from each (at least 9)", calls)
			}
			if fmt.Sprint(queuedAtDelivered) != "[3 1]" {
				t.Errorf("Key(k).Queued inside OnDeliver of the two deliveries = %v, want [3 1]", queuedAtDelivered)
			}
		})
	})
}
