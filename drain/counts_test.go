package drain_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// Stats keeps its keys with jobs and its jobs stepped aside as they
// change, and Deepest its keys by depth, not by looking at every key:
// after every move of a randomized run — jobs stored, delivered, failed, paused, given up on, retried,
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
				keys, aside, deepest, err := r.d.Recount(5)
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				if st.Keys != keys || st.SteppedAside != aside {
					t.Fatalf("%s: Stats says %d keys with jobs and %d stepped aside; a count over every key says %d and %d",
						when, st.Keys, st.SteppedAside, keys, aside)
				}
				var depths []int64
				for _, kd := range r.d.Deepest(5) {
					depths = append(depths, kd.Depth)
				}
				if !slices.Equal(depths, deepest) {
					t.Fatalf("%s: the 5 deepest keys have %v jobs; a look at every key says %v", when, depths, deepest)
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

// BenchmarkDeepest: finding the 10 deepest keys does not walk the keys:
// among 100,000 keys holding jobs (one to three each) it costs about what
// it costs among 10 (the keys it returns are further apart in memory).
func BenchmarkDeepest(b *testing.B) {
	for _, keys := range []int{10, 100_000} {
		b.Run(fmt.Sprint("keys=", keys), func(b *testing.B) {
			r := newReplay(b, 3, drain.Pace{Interval: time.Second}, drain.Config{Passive: true})
			ctx := context.Background()
			for i := range keys {
				for range 1 + i%3 {
					if _, err := r.q.Admit(ctx, queue.Job{Key: fmt.Sprint("k", i)}); err != nil {
						b.Fatal(err)
					}
				}
			}
			if top := r.d.Deepest(10); len(top) != 10 || top[0].Depth != 3 {
				b.Fatalf("Deepest(10) = %v", top)
			}
			b.ReportAllocs()
			for b.Loop() {
				r.d.Deepest(10)
			}
		})
	}
}

// Deepest names the keys with the most jobs, deepest first and by key on a
// tie, past the depths its index tells apart too, as their depths rise and
// fall; a Group's are those of all its partitions.
func TestDeepest(t *testing.T) {
	ctx := context.Background()
	admit := func(t *testing.T, q *drain.MemQueue, key string, n int) {
		t.Helper()
		for range n {
			if _, err := q.Admit(ctx, queue.Job{Key: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill := func(t *testing.T, q *drain.MemQueue) int {
		admit(t, q, "a", 1500)
		admit(t, q, "b", 1100)
		admit(t, q, "c", 1300)
		admit(t, q, "e", 5)
		admit(t, q, "d", 5)
		for i := range 1000 {
			admit(t, q, fmt.Sprint("k", i), 1+i%3)
		}
		return 1500 + 1100 + 1300 + 10 + 1000 + 999
	}
	want := func(t *testing.T, what string, got []drain.KeyDepth, want string) {
		t.Helper()
		if s := fmt.Sprint(got); s != want {
			t.Errorf("%s: Deepest = %s, want %s", what, s, want)
		}
	}

	r := newReplay(t, 2000, drain.Pace{Interval: time.Second}, drain.Config{Passive: true})
	fill(t, r.q)
	want(t, "filled", r.d.Deepest(5), "[{a 1500} {c 1300} {b 1100} {d 5} {e 5}]")
	want(t, "filled, 2", r.d.Deepest(2), "[{a 1500} {c 1300}]")
	// Another drainer delivers 1,000 of a's and all of c's: the depths
	// come from the queue.
	tokenA, tokenC := tokenOf(t, "a"), tokenOf(t, "c")
	for range 1000 {
		m, err := r.q.Next(ctx, tokenA, 0)
		if err != nil {
			t.Fatal(err)
		}
		r.q.Remove(ctx, m.Seq)
	}
	for m, err := r.q.Next(ctx, tokenC, 0); err == nil; m, err = r.q.Next(ctx, tokenC, 0) {
		r.q.Remove(ctx, m.Seq)
	}
	r.d.ResyncNow(ctx)
	want(t, "after the resync", r.d.Deepest(4), "[{b 1100} {a 500} {d 5} {e 5}]")
	if _, _, deepest, err := r.d.Recount(4); err != nil || fmt.Sprint(deepest) != "[1100 500 5 5]" {
		t.Errorf("Recount = %v, %v", deepest, err)
	}
	if got := r.d.Deepest(0); len(got) != 0 {
		t.Errorf("Deepest(0) = %v", got)
	}

	q, err := drain.NewMemQueue("p", 2000, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	g := drain.NewGroup(q, 4, newRecorder(), drain.Pace{Interval: time.Second}, drain.Config{Passive: true})
	g.Start(t.Context())
	t.Cleanup(g.Stop)
	total := fill(t, q)
	for deadline := time.Now().Add(10 * time.Second); g.Stats().Queued != int64(total); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the group saw %d jobs after 10 s, want %d", g.Stats().Queued, total)
		}
	}
	want(t, "a group of 4", g.Deepest(5), "[{a 1500} {c 1300} {b 1100} {d 5} {e 5}]")
}
