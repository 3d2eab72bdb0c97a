package drain

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/shaper-dev/shaper/queue"
)

// MemQueue is a policy's bounded per-key queue in memory, for replays and
// tests: what *queue.Queue keeps in JetStream, with the same admission rules
// and the same method shapes where the two overlap. Admit refuses a job for
// a key that holds Limit jobs, atomically, as JetStream's MaxMsgsPerSubject
// with DiscardNewPerSubject does.
//
// It is cheap: no goroutine of its own, O(1) work per Admit, Get and Remove
// (plus one call per watcher; Next, seldom asked, looks at every job), and
// memory for the jobs stored, none for those removed. Unlike JetStream it keeps no duplicate window: every Admit
// stores a new job, and Receipt.Duplicate is always false. Admit keeps the
// job's Payload as it is, without a copy: the caller must not change it
// afterwards. Its methods take a ctx for the shape of *queue.Queue's, and
// never block on it.
//
// Watchers are told of a job from Admit itself, before it returns, with
// the queue's lock held: a driven Drainer (Advance) knows of every job as
// soon as it is admitted. A MemQueue is safe for concurrent use.
type MemQueue struct {
	policy     string
	clock      Clock
	epoch      string // the first part of the ids Admit makes
	maxPayload int
	watchJobs  bool

	mu       sync.Mutex
	size     int
	limit    int
	last     uint64                // sequence of the last job stored
	jobs     map[uint64]*queue.Msg // stored jobs by sequence, never changed once stored
	depths   map[string]int        // stored jobs per key token, no zero entries
	watchers []*memWatcher
}

type memWatcher struct{ fn func(queue.Notice) }

// MemQueueConfig holds a MemQueue's optional settings. The zero value means
// the documented defaults.
type MemQueueConfig struct {
	// MaxPayload is the largest payload Admit accepts, in bytes. Default
	// queue.DefaultMaxPayload.
	MaxPayload int
	// Clock stamps jobs admitted without an EnqueuedAt, and dates the
	// queue (the ids Admit makes). Default: the time package's clock.
	Clock Clock
	// WatchJobs makes Watch report each job whole (queue.Notice.Job, a
	// copy), as *queue.Queue's does by default. By default it reports
	// sequences only: a replay reads its jobs at no cost.
	WatchJobs bool
}

// NewMemQueue returns an empty MemQueue of policy with room for size jobs
// per key.
func NewMemQueue(policy string, size int, cfg MemQueueConfig) (*MemQueue, error) {
	if size <= 0 {
		return nil, fmt.Errorf("drain: mem queue %q: size %d must be positive", policy, size)
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = queue.DefaultMaxPayload
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	return &MemQueue{
		policy:     policy,
		clock:      cfg.Clock,
		epoch:      queue.EpochOf(cfg.Clock.Now()),
		maxPayload: cfg.MaxPayload,
		watchJobs:  cfg.WatchJobs,
		size:       size,
		limit:      size,
		jobs:       make(map[uint64]*queue.Msg),
		depths:     make(map[string]int),
	}, nil
}

// Policy returns the policy name the queue belongs to.
func (q *MemQueue) Policy() string { return q.policy }

// Size returns how many jobs a key may hold.
func (q *MemQueue) Size() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.size
}

// Limit returns the per-key limit Admit enforces atomically. It is at
// least Size.
func (q *MemQueue) Limit() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.limit
}

// MaxPayload returns the largest payload Admit accepts, in bytes.
func (q *MemQueue) MaxPayload() int { return q.maxPayload }

// Resize changes how many jobs a key may hold, as *queue.Queue's Resize
// does: a larger size raises Limit at once; a smaller one only lowers Size,
// and while Size is below Limit callers enforce Size themselves.
func (q *MemQueue) Resize(_ context.Context, size int) error {
	if size <= 0 {
		return fmt.Errorf("drain: mem queue %q: resize: size %d must be positive", q.policy, size)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.limit = max(q.limit, size)
	q.size = size
	return nil
}

// Admit stores job at the tail of its key's queue and tells the watchers.
// It returns an error wrapping queue.ErrFull when the key holds Limit jobs,
// queue.ErrTooLarge for an oversized payload and queue.ErrBadKey for a bad
// key. A job without an ID gets the id of where it is stored
// (queue.JobID), one without EnqueuedAt the clock's time, and Attempt 0
// becomes 1, as when *queue.Queue reads a job back.
func (q *MemQueue) Admit(_ context.Context, job queue.Job) (queue.Receipt, error) {
	token, err := queue.EncodeKey(job.Key)
	if err != nil {
		return queue.Receipt{}, fmt.Errorf("drain: mem queue: admit: %w", err)
	}
	if len(job.Payload) > q.maxPayload {
		return queue.Receipt{}, fmt.Errorf("drain: mem queue: admit: %w: %d bytes, at most %d", queue.ErrTooLarge, len(job.Payload), q.maxPayload)
	}
	m := &queue.Msg{Token: token, Job: job}
	if job.Header != nil {
		m.Header = queue.JobHeader(job.Header)
	}
	if m.Attempt < 1 {
		m.Attempt = 1
	}
	if m.EnqueuedAt.IsZero() {
		m.EnqueuedAt = q.clock.Now()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.depths[token]; n >= q.limit {
		return queue.Receipt{}, fmt.Errorf("drain: mem queue: admit: %w: key %q holds %d jobs", queue.ErrFull, job.Key, n)
	}
	q.last++
	m.Seq = q.last
	if m.ID == "" {
		m.ID = queue.JobID(q.epoch, m.Seq)
	}
	q.jobs[m.Seq] = m
	q.depths[token]++
	for _, w := range q.watchers {
		w.fn(q.notice(m))
	}
	return queue.Receipt{ID: m.ID, Seq: m.Seq}, nil
}

// Get returns the job stored at seq, which must be a job of key token; an
// error wrapping queue.ErrEmpty when it is gone or another key's. The job
// is a copy: changing it changes nothing stored.
func (q *MemQueue) Get(_ context.Context, token string, seq uint64) (*queue.Msg, error) {
	q.mu.Lock()
	m := q.jobs[seq]
	q.mu.Unlock()
	switch {
	case m == nil:
		return nil, fmt.Errorf("drain: mem queue: get %d: %w", seq, queue.ErrEmpty)
	case m.Token != token:
		return nil, fmt.Errorf("drain: mem queue: get %d: %w: it belongs to %s, not %s", seq, queue.ErrEmpty, m.Token, token)
	}
	c := *m
	return &c, nil
}

// Next returns the first job of key token stored at seq from or after it;
// an error wrapping queue.ErrEmpty when there is none. Unlike Get it looks
// at every job stored. The job is a copy.
func (q *MemQueue) Next(_ context.Context, token string, from uint64) (*queue.Msg, error) {
	q.mu.Lock()
	var first *queue.Msg
	for seq, m := range q.jobs {
		if seq >= from && m.Token == token && (first == nil || seq < first.Seq) {
			first = m
		}
	}
	q.mu.Unlock()
	if first == nil {
		return nil, fmt.Errorf("drain: mem queue: next of %s from %d: %w", token, from, queue.ErrEmpty)
	}
	c := *first
	return &c, nil
}

// LastSeq returns the sequence of the last job stored.
func (q *MemQueue) LastSeq(context.Context) (uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last, nil
}

// Remove deletes the job stored at seq, freeing its key's slot. Removing a
// job that is already gone is not an error.
func (q *MemQueue) Remove(_ context.Context, seq uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := q.jobs[seq]
	if m == nil {
		return nil
	}
	delete(q.jobs, seq)
	if q.depths[m.Token]--; q.depths[m.Token] == 0 {
		delete(q.depths, m.Token)
	}
	return nil
}

// Depths returns the number of jobs stored per key.
func (q *MemQueue) Depths(ctx context.Context) (map[string]uint64, error) {
	byToken, _, _ := q.TokenDepths(ctx)
	out := make(map[string]uint64, len(byToken))
	for token, n := range byToken {
		if key, err := queue.DecodeKey(token); err == nil {
			out[key] = n
		}
	}
	return out, nil
}

// TokenDepths is Depths keyed by key token, and the sequence of the last
// job stored: the count holds every job stored up to it, and no other.
func (q *MemQueue) TokenDepths(context.Context) (map[string]uint64, uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]uint64, len(q.depths))
	for token, n := range q.depths {
		out[token] = uint64(n)
	}
	return out, q.last, nil
}

// Watch calls fn for every job stored now, in order, and then for every job
// Admit stores, from Admit itself, until ctx ends; then it returns nil. fn
// is called with the queue's lock held: it must not call the queue.
func (q *MemQueue) Watch(ctx context.Context, fn func(queue.Notice)) error {
	w := q.watch(fn)
	<-ctx.Done()
	q.unwatch(w)
	return nil
}

// watchNow is Watch without waiting for ctx: fn is registered, and every
// job stored so far reported, when it returns.
func (q *MemQueue) watchNow(ctx context.Context, fn func(queue.Notice)) {
	w := q.watch(fn)
	context.AfterFunc(ctx, func() { q.unwatch(w) })
}

func (q *MemQueue) watch(fn func(queue.Notice)) *memWatcher {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, seq := range slices.Sorted(maps.Keys(q.jobs)) {
		fn(q.notice(q.jobs[seq]))
	}
	w := &memWatcher{fn: fn}
	q.watchers = append(q.watchers, w)
	return w
}

// notice is what Watch reports of the job m. q.mu must be held.
func (q *MemQueue) notice(m *queue.Msg) queue.Notice {
	if !q.watchJobs {
		return queue.Notice{Token: m.Token, Seq: m.Seq}
	}
	c := *m
	return queue.NoticeOf(&c)
}

func (q *MemQueue) unwatch(w *memWatcher) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.watchers = slices.DeleteFunc(q.watchers, func(x *memWatcher) bool { return x == w })
}
