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

// Stats keeps its keys with jobs and its jobs stepped aside as they
// change, not by looking at every key: after every move of a randomized
// run — jobs stored, delivered, failed, paused, given up on, retried,
// stepped aside, dead-lettered (or not, when the dead letter fails),
// deactivations with a resync of the depths from the queue, releases —
// they are what a count over every key says.
func TestStatsCountsMatchRecount(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 18))
			pace := drain.Pace{Interval: 100 * time.Millisecond, Retry: drain.Retry{
				Attempts: 4, Backoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Budget: 0.5}}
			if seed%3 == 2 {
				pace.Retry.Budget = 0 // failed jobs block their key: nothing steps aside
				pace.Total = 20 * time.Millisecond
			}
			r := newReplay(t, 6, pace, drain.Config{
				Jitter: rng.Float64,
				DeadLetter: func(context.Context, *queue.Msg, string, []string) error {
					if rng.IntN(5) == 0 {
						return errors.New("dead-letter stream down")
					}
					return nil
				},
			})
			r.quiet = true
			failing := true
			r.fail = func(*drain.Delivery) error {
				if !failing {
					return nil
				}
				switch n := rng.IntN(20); {
				case n < 5:
					return drain.ErrDelivery
				case n == 5:
					return &drain.RetryAfterError{After: 150 * time.Millisecond, Cause: "pause"}
				case n == 6:
					return &drain.GiveUpError{Reason: drain.ReasonDelivery, Cause: "refused"}
				}
				return nil
			}
			ctx := context.Background()
			check := func(when string) (keys, aside int) {
				t.Helper()
				st := r.d.Stats()
				keys, aside = r.d.Recount()
				if st.Keys != keys || st.SteppedAside != aside {
					t.Fatalf("%s: Stats says %d keys with jobs and %d stepped aside; a count over every key says %d and %d",
						when, st.Keys, st.SteppedAside, keys, aside)
				}
				return keys, aside
			}
			maxKeys, maxAside := 0, 0
			for i := range 3000 {
				switch n := rng.IntN(100); {
				case n < 45:
					key := fmt.Sprint("k", rng.IntN(40))
					if _, err := r.q.Admit(ctx, queue.Job{Key: key}); err != nil && !errors.Is(err, queue.ErrFull) {
						t.Fatal(err)
					}
				case n < 97:
					r.until(r.clock.Now().Add(time.Duration(rng.IntN(150)) * time.Millisecond))
				case n < 98:
					// Another drainer takes over for a while and delivers
					// the oldest jobs of a few keys; this one sees it from
					// the queue's depths (resync) or from the reads that
					// find them gone.
					r.d.SetActive(false)
					check(fmt.Sprint("move ", i, ", deactivated"))
					for range 3 {
						token, _ := queue.EncodeKey(fmt.Sprint("k", rng.IntN(40)))
						if m, err := r.q.Next(ctx, token, 0); err == nil {
							r.q.Remove(ctx, m.Seq)
						}
					}
					if rng.IntN(2) == 0 {
						r.d.ResyncNow(ctx)
						check(fmt.Sprint("move ", i, ", resynced"))
					}
					r.d.SetActive(true)
				default:
					if err := r.d.Release(ctx); err != nil {
						t.Fatal(err)
					}
					check(fmt.Sprint("move ", i, ", released"))
					r.d.SetActive(true)
				}
				keys, aside := check(fmt.Sprint("move ", i))
				maxKeys, maxAside = max(maxKeys, keys), max(maxAside, aside)
			}
			failing = false
			r.until(r.clock.Now().Add(time.Minute))
			if keys, aside := check("drained"); keys != 0 || aside != 0 {
				t.Errorf("drained: %d keys with jobs, %d stepped aside; want none", keys, aside)
			}
			if maxKeys < 10 || pace.Retry.Budget > 0 && maxAside == 0 {
				t.Errorf("the run reached only %d keys with jobs and %d jobs stepped aside: it tests little", maxKeys, maxAside)
			}
		})
	}
}

// BenchmarkStats: Stats costs the same with 10 keys holding jobs as with
// 100,000 (a passive drainer that has seen one job of each).
func BenchmarkStats(b *testing.B) {
	for _, keys := range []int{10, 100_000} {
		b.Run(fmt.Sprint("keys=", keys), func(b *testing.B) {
			r := newReplay(b, 1, drain.Pace{Interval: time.Second}, drain.Config{Passive: true})
			ctx := context.Background()
			for i := range keys {
				if _, err := r.q.Admit(ctx, queue.Job{Key: fmt.Sprint("k", i)}); err != nil {
					b.Fatal(err)
				}
			}
			if st := r.d.Stats(); st.Keys != keys {
				b.Fatalf("Stats = %+v, want %d keys", st, keys)
			}
			b.ReportAllocs()
			for b.Loop() {
				r.d.Stats()
			}
		})
	}
}
