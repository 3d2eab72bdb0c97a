package replay

import (
	"cmp"
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
	// Downstream is what the replays deliver to. The zero value takes
	// every delivery.
	Downstream Downstream
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
// and total are therefore replayed in turn, smallest queue first.
func RunAll(ctx context.Context, candidates []policies.Policy, src Source, cfg Config) ([]Result, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]Result, len(candidates))
	var done sync.Mutex // Config.Done is called one at a time
	finish := func(i int, r Result) {
		results[i] = r
		if cfg.Done != nil {
			done.Lock()
			defer done.Unlock()
			cfg.Done(i, &results[i])
		}
	}
	chains := queueChains(candidates)
	work := make(chan []int, len(chains))
	for _, chain := range chains {
		work <- chain
	}
	close(work)
	var wg sync.WaitGroup
	for range min(cfg.Parallel, len(chains)) {
		wg.Go(func() {
			for chain := range work {
				if ctx.Err() != nil {
					return
				}
				if err := runChain(ctx, candidates, chain, src, cfg, finish); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return results, nil
}

// runChain replays the candidates of chain, which differ only by their
// queue, smallest first, until one never refused a job: the larger queues
// after it are derived from its result.
func runChain(ctx context.Context, candidates []policies.Policy, chain []int, src Source, cfg Config, finish func(int, Result)) error {
	var res Result
	for n, i := range chain {
		if n > 0 && neverRefused(&res) {
			res.Policy, res.Derived = candidates[i], true
		} else {
			var err error
			if res, err = Run(ctx, candidates[i], src, cfg); err != nil {
				return fmt.Errorf("candidate %s: %w", Describe(candidates[i]), err)
			}
		}
		finish(i, res)
	}
	return nil
}

// neverRefused reports whether no submission of r found its key's queue
// full or the queue unavailable.
func neverRefused(r *Result) bool {
	return r.Rejected == 0 && r.Deferred == 0 && r.Unavailable == 0
}

// queueChains groups the indexes of candidates that differ at most by their
// queue, each group smallest queue first, the groups in the order of their
// first candidate.
func queueChains(candidates []policies.Policy) [][]int {
	var chains [][]int
	for i, c := range candidates {
		k := slices.IndexFunc(chains, func(chain []int) bool { return sameButQueue(candidates[chain[0]], c) })
		if k < 0 {
			chains = append(chains, []int{i})
			continue
		}
		chains[k] = append(chains[k], i)
	}
	for _, chain := range chains {
		slices.SortStableFunc(chain, func(a, b int) int { return cmp.Compare(candidates[a].Queue, candidates[b].Queue) })
	}
	return chains
}

// sameButQueue reports whether two candidates differ at most by their
// queue size (the candidates of a grid vary only outflow, queue, total and
// adapt).
func sameButQueue(a, b policies.Policy) bool {
	b.Queue = a.Queue
	return same(a, b)
}

// Describe names a candidate by what the replays vary: outflow, queue,
// total and adapt ("outflow 20/s, queue 100, total 300/s, adapt per
// policy").
func Describe(p policies.Policy) string {
	s := fmt.Sprintf("outflow %s, queue %d", p.Outflow, p.Queue)
	if !p.Total.IsZero() {
		s += ", total " + p.Total.String()
	}
	if p.Adapt != nil {
		s += ", adapt per " + string(p.Adapt.Per)
	}
	return s
}

// DescribeAmong is Describe of p, one of the policies of results, naming
// what p lacks that others have ("no total", "no adapt"): among
// candidates with and without a total, "outflow 6/m, queue 10" alone
// would read as the one with the total.
func DescribeAmong(results []Result, p policies.Policy) string {
	s := Describe(p)
	var total, adapt bool
	for i := range results {
		total = total || !results[i].Policy.Total.IsZero()
		adapt = adapt || results[i].Policy.Adapt != nil
	}
	if total && p.Total.IsZero() {
		s += ", no total"
	}
	if adapt && p.Adapt == nil {
		s += ", no adapt"
	}
	return s
}
