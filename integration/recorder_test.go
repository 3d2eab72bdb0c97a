package integration

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// recorder is a downstream consumer: it subscribes to a policy's delivery
// subjects, records every Shaper-Job-Id it receives, and replies to
// confirmed deliveries after recording them. It reconnects on its own when
// its server goes away. Its methods are safe for concurrent use.
type recorder struct {
	t  *testing.T
	nc *nats.Conn

	mu      sync.Mutex
	count   map[string]int      // job id → deliveries
	byKey   map[string][]string // key → job ids in delivery order, first deliveries only
	total   int
	times   []time.Time            // arrival of every delivery
	keyAt   map[string][]time.Time // key → arrival of each of its deliveries
	firstAt map[string][]time.Time // key → arrival of each of its jobs' first deliveries
	retries int                    // deliveries with Shaper-Attempt > 1
	asyncEr string                 // first asynchronous error (a slow consumer drops messages)
}

// record subscribes to subject (such as "shaper.out.orders.>") at url.
func record(t *testing.T, url, subject string) *recorder {
	t.Helper()
	r := &recorder{t: t, count: map[string]int{}, byKey: map[string][]string{}, keyAt: map[string][]time.Time{}, firstAt: map[string][]time.Time{}}
	nc, err := nats.Connect(url,
		nats.Name("integration recorder"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.RetryOnFailedConnect(true),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			r.mu.Lock()
			if r.asyncEr == "" {
				r.asyncEr = err.Error()
			}
			r.mu.Unlock()
		}),
	)
	if err != nil {
		t.Fatalf("recorder: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	r.nc = nc
	if _, err := nc.Subscribe(subject, r.handle); err != nil {
		t.Fatalf("recorder: subscribe %s: %v", subject, err)
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		t.Fatalf("recorder: flush: %v", err)
	}
	return r
}

func (r *recorder) handle(m *nats.Msg) {
	id, key := m.Header.Get("Shaper-Job-Id"), m.Header.Get("Shaper-Key")
	r.mu.Lock()
	r.count[id]++
	r.total++
	now := time.Now()
	r.times = append(r.times, now)
	r.keyAt[key] = append(r.keyAt[key], now)
	if r.count[id] == 1 {
		r.byKey[key] = append(r.byKey[key], id)
		r.firstAt[key] = append(r.firstAt[key], now)
	}
	if a := m.Header.Get("Shaper-Attempt"); a != "" && a != "1" {
		r.retries++
	}
	r.mu.Unlock()
	if m.Reply != "" {
		_ = m.Respond(nil) // lost when the shaper is gone: it delivers again
	}
}

// delivered returns how many distinct jobs have arrived.
func (r *recorder) delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.count)
}

// deliveryReport sums up the deliveries of the jobs in want.
type deliveryReport struct {
	missing    []string // ids in want never delivered
	duplicates int      // deliveries beyond the first, over the ids in want
	dupJobs    int      // ids in want delivered more than once
	unknown    int      // distinct delivered ids not in want
	total      int      // every delivery received
	retries    int      // deliveries with Shaper-Attempt > 1
}

func (r *recorder) report(want []string) deliveryReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := deliveryReport{total: r.total, retries: r.retries}
	in := make(map[string]bool, len(want))
	for _, id := range want {
		in[id] = true
		switch n := r.count[id]; {
		case n == 0:
			rep.missing = append(rep.missing, id)
		case n > 1:
			rep.duplicates += n - 1
			rep.dupJobs++
		}
	}
	for id := range r.count {
		if !in[id] {
			rep.unknown++
		}
	}
	sort.Strings(rep.missing)
	return rep
}

// waitAll waits at most d until every id in want has been delivered, and
// returns the report at that point. It fails the test on a slow-consumer
// error, which would make the count meaningless.
func (r *recorder) waitAll(want []string, d time.Duration) deliveryReport {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for {
		rep := r.report(want)
		r.mu.Lock()
		asyncErr := r.asyncEr
		r.mu.Unlock()
		if asyncErr != "" {
			r.t.Fatalf("recorder: %s (deliveries were dropped by the client)", asyncErr)
		}
		if len(rep.missing) == 0 || time.Now().After(deadline) {
			return rep
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// duplicatesByKey returns, per key, the deliveries beyond the first of its
// jobs.
func (r *recorder) duplicatesByKey() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	dups := map[string]int{}
	for key, ids := range r.byKey {
		for _, id := range ids {
			if n := r.count[id]; n > 1 {
				dups[key] += n - 1
			}
		}
	}
	return dups
}

// lastAt returns when the last delivery arrived.
func (r *recorder) lastAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.times) == 0 {
		return time.Time{}
	}
	return r.times[len(r.times)-1]
}

// firstAfter returns when the first delivery after t arrived, or the zero
// time.
func (r *recorder) firstAfter(t time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.times {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// longestGap returns the longest time without a delivery between since and
// the last delivery.
func (r *recorder) longestGap(since time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gap time.Duration
	prev := since
	for _, at := range r.times {
		if at.Before(since) {
			continue
		}
		gap = max(gap, at.Sub(prev))
		prev = at
	}
	return gap
}

// keyTimes returns the arrival times of every delivery of key, in order.
func (r *recorder) keyTimes(key string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.keyAt[key]...)
}

// order returns the ids of key's jobs in the order they were first delivered.
func (r *recorder) order(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.byKey[key]...)
}

// firstFew returns at most n of ids, for messages.
func firstFew(ids []string, n int) []string {
	if len(ids) > n {
		return ids[:n]
	}
	return ids
}
