package drain

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// hub is what the partitions of a Group share of their queue: one watch,
// whose notices each go to the partition of their key, and one count of
// the queue's depths, split by partition. Each partition's Drainer sees
// the queue through a view of its own.
type hub struct {
	q Queue
	n int

	mu         sync.Mutex
	fns        []func(queue.Notice) // each partition's watcher, once registered
	registered int
	seen       seenMark // highest sequence dispatched, and the awaitSeen calls waiting

	// dispatching is the highest sequence whose dispatch began: a
	// partition may have counted the job from then on.
	dispatching atomic.Uint64

	depthMu   sync.Mutex
	depthAt   time.Time           // when the read of depths began
	depthSeen uint64              // dispatching then
	depths    []map[string]uint64 // by partition
	depthUpTo uint64              // the sequence the count reaches (Queue.TokenDepths)
	bars      []time.Time         // by partition: serve it only a read begun since (recountFrom)
}

// depthsFresh is how long one count of the queue's depths serves the
// partitions asking for it: each passive partition asks every
// resyncPeriod, and one read answers them all.
const depthsFresh = time.Second

func newHub(q Queue, n int) *hub {
	return &hub{q: q, n: n, fns: make([]func(queue.Notice), n), bars: make([]time.Time, n)}
}

// view returns partition i's view of the queue: a syncView when the queue
// reports jobs from the call storing them (MemQueue), so that a driven
// Group stays deterministic.
func (h *hub) view(i int) Queue {
	v := &view{hub: h, i: i}
	if _, ok := h.q.(syncWatcher); ok {
		return &syncView{v}
	}
	return v
}

// register records partition i's watcher and reports whether it was the
// last one missing: then the watch of the queue may start.
func (h *hub) register(i int, fn func(queue.Notice)) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fns[i] == nil {
		h.registered++
	}
	h.fns[i] = fn
	return h.registered == h.n
}

// dispatch tells the partition of n's key of it. The queue's watch calls
// it one notice at a time, in order; it starts once every partition has
// registered, so h.fns no longer changes.
func (h *hub) dispatch(n queue.Notice) {
	if n.Seq > h.dispatching.Load() {
		h.dispatching.Store(n.Seq) // one watch dispatches, in order
	}
	h.fns[PartitionOf(n.Token, h.n)](n)
	h.mu.Lock()
	h.seen.advance(n.Seq)
	h.mu.Unlock()
}

// awaitSeen waits until the job at seq was dispatched to its partition,
// and reports whether it was before ctx ended.
func (h *hub) awaitSeen(ctx context.Context, seq uint64) bool {
	return h.seen.await(ctx, &h.mu, seq)
}

// tokenDepths returns partition i's part of the queue's depths, read at
// most depthsFresh ago, and after every job the watch has dispatched so
// far was stored. A partition sets its keys' depths from the count and
// keeps, of the jobs it was told of, as many of the newest as the count
// says are left (Drainer.resync): a count read before a job it was told
// of would drop that job, not an older one already gone, and the key's
// next drainer would deliver the job after later ones.
func (h *hub) tokenDepths(ctx context.Context, i int) (map[string]uint64, uint64, error) {
	h.depthMu.Lock()
	defer h.depthMu.Unlock()
	if h.depths == nil || time.Since(h.depthAt) > depthsFresh || h.dispatching.Load() > h.depthSeen || h.depthAt.Before(h.bars[i]) {
		seen, at := h.dispatching.Load(), time.Now()
		all, upTo, err := h.q.TokenDepths(ctx)
		if err != nil {
			return nil, 0, err
		}
		split := make([]map[string]uint64, h.n)
		for p := range split {
			split[p] = make(map[string]uint64)
		}
		for token, n := range all {
			split[PartitionOf(token, h.n)][token] = n
		}
		h.depths, h.depthAt, h.depthSeen, h.depthUpTo = split, at, seen, upTo
	}
	return h.depths[i], h.depthUpTo, nil
}

// recountFrom makes partition i's next count of depths one read from now
// on: partitions taken over together share one read begun after each was
// taken, instead of reading the queue once each.
func (h *hub) recountFrom(i int, now time.Time) {
	h.depthMu.Lock()
	h.bars[i] = now
	h.depthMu.Unlock()
}

// view is one partition's Queue: the queue itself, but for its watch and
// depths, which are its keys' only.
type view struct {
	*hub
	i int
}

func (v *view) Policy() string { return v.q.Policy() }

// Watch registers the partition's watcher; the last partition to register
// runs the queue's watch for all of them, until its ctx ends (the
// partitions of a Group start and stop together).
func (v *view) Watch(ctx context.Context, fn func(queue.Notice)) error {
	if v.register(v.i, fn) {
		return v.q.Watch(ctx, v.dispatch)
	}
	<-ctx.Done()
	return nil
}

func (v *view) Get(ctx context.Context, token string, seq uint64) (*queue.Msg, error) {
	return v.q.Get(ctx, token, seq)
}

func (v *view) Next(ctx context.Context, token string, from uint64) (*queue.Msg, error) {
	return v.q.Next(ctx, token, from)
}

func (v *view) LastSeq(ctx context.Context) (uint64, error) { return v.q.LastSeq(ctx) }

func (v *view) Remove(ctx context.Context, seq uint64) error { return v.q.Remove(ctx, seq) }

func (v *view) TokenDepths(ctx context.Context) (map[string]uint64, uint64, error) {
	return v.tokenDepths(ctx, v.i)
}

// awaitReported waits until the watch of the queue has reported the job
// at seq, whatever its partition, to its partition's Drainer (resync).
func (v *view) awaitReported(ctx context.Context, seq uint64) bool { return v.awaitSeen(ctx, seq) }

// syncView is a view of a queue that reports jobs from the call storing
// them: the last partition to register starts that report for all.
type syncView struct{ *view }

func (v *syncView) watchNow(ctx context.Context, fn func(queue.Notice)) {
	if v.register(v.i, fn) {
		v.q.(syncWatcher).watchNow(ctx, v.dispatch)
	}
}
