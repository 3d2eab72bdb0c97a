package replay

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// Config holds a replay's optional settings; the zero value means the
// documented defaults.
type Config struct {
	// Parallel bounds the candidates replayed at once by RunAll. Default
	// runtime.GOMAXPROCS(0).
	Parallel int
	// Series keeps each replay over the trace's time (Result.Series), for
	// plots: at most 1,024 points, however long the trace.
	Series bool
	// MaxPayload is the largest payload the queue takes, as the shaper's
	// --max-payload. Default queue.DefaultMaxPayload.
	MaxPayload int
	// Done, when set, is told of every candidate RunAll finished, with its
	// index. It is called from the replaying goroutines, one at a time.
	Done func(i int, r *Result)
}

func (c Config) withDefaults() Config {
	if c.Parallel <= 0 {
		c.Parallel = runtime.GOMAXPROCS(0)
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = queue.DefaultMaxPayload
	}
	return c
}

// RunAll replays the trace under every policy of candidates, at most
// Config.Parallel at a time, each reading the trace on its own, and returns
// their results in the order of candidates. It stops at the first error.
//
// A candidate that differs from another only by a larger queue is not
// replayed when the smaller queue never refused a job (nothing rejected,
// deferred or unavailable): every submission found room in it, so a larger
// queue admits, delivers and waits exactly alike. Its result is the smaller
// queue's, with its own Policy and Derived set. Candidates of one outflow
// and total are therefore replayed smallest queue first.
func RunAll(ctx context.Context, candidates []policies.Policy, src Source, cfg Config) ([]Result, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]Result, len(candidates))
	larger, ready := queueChains(candidates)
	var (
		mu   sync.Mutex
		wake = sync.NewCond(&mu)
		left = len(candidates) // neither replayed nor derived yet
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		wake.Broadcast()
	})
	defer stop()
	finish := func(i int, r Result) { // mu held
		results[i] = r
		left--
		if cfg.Done != nil {
			cfg.Done(i, &results[i])
		}
	}
	var wg sync.WaitGroup
	for range min(cfg.Parallel, len(candidates)) {
		wg.Go(func() {
			mu.Lock()
			defer mu.Unlock()
			for {
				for len(ready) == 0 && left > 0 && ctx.Err() == nil {
					wake.Wait()
				}
				if len(ready) == 0 || ctx.Err() != nil {
					return
				}
				i := ready[0]
				ready = ready[1:]
				mu.Unlock()
				res, err := Run(ctx, candidates[i], src, cfg)
				mu.Lock()
				if err != nil {
					cancel(fmt.Errorf("candidate %s: %w", Describe(candidates[i]), err))
					return
				}
				finish(i, res)
				for j := larger[i]; j >= 0; j = larger[j] {
					if !neverRefused(&res) {
						ready = append(ready, j)
						break
					}
					same := res
					same.Policy, same.Derived = candidates[j], true
					finish(j, same)
				}
				wake.Broadcast()
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return results, nil
}

// neverRefused reports whether no submission of r found its key's queue
// full or the queue unavailable.
func neverRefused(r *Result) bool {
	return r.Rejected == 0 && r.Deferred == 0 && r.Unavailable == 0
}

// queueChains orders candidates by queue within each outflow and total:
// larger[i] is the candidate like i but for the next larger queue (-1:
// none), and first the smallest queue of each, in the order of candidates.
func queueChains(candidates []policies.Policy) (larger, first []int) {
	larger = make([]int, len(candidates))
	for i, c := range candidates {
		larger[i] = -1
		for j, d := range candidates {
			if d.Queue > c.Queue && sameButQueue(c, d) && (larger[i] < 0 || d.Queue < candidates[larger[i]].Queue) {
				larger[i] = j
			}
		}
	}
	for i, c := range candidates {
		if !slices.ContainsFunc(candidates, func(d policies.Policy) bool { return d.Queue < c.Queue && sameButQueue(c, d) }) {
			first = append(first, i)
		}
	}
	return larger, first
}

// sameButQueue reports whether two candidates differ at most by their
// queue size (the candidates of a grid vary only outflow, queue and total).
func sameButQueue(a, b policies.Policy) bool {
	b.Queue = a.Queue
	return same(a, b)
}

// Describe names a candidate by what the replays vary: outflow, queue and
// total ("outflow 20/s, queue 100, total 300/s").
func Describe(p policies.Policy) string {
	s := fmt.Sprintf("outflow %s, queue %d", p.Outflow, p.Queue)
	if !p.Total.IsZero() {
		s += ", total " + p.Total.String()
	}
	return s
}
