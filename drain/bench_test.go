package drain_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// drainBench is a drainer in steady state: benchKeys keys, each kept at
// benchBacklog queued jobs by feeders that admit a new job for a key
// whenever one of its jobs is delivered, so every key drains at the policy
// rate for as long as the benchmark runs. Each delivery's timing error
// (Started minus Scheduled, from drain.Config.OnDeliver) and each key's
// gap error (|Started − its Started before − interval|, the figure the
// smooth benchmark takes at a consumer) are recorded while a round is
// being measured.
type drainBench struct {
	q    *queue.Queue
	d    *drain.Drainer
	feed chan string
	ids  atomic.Uint64

	mu       sync.Mutex
	record   bool
	want     int
	errs     []time.Duration
	interval time.Duration
	last     map[string]time.Time // each key's last start while recording
	gaps     []time.Duration      // |gap − interval| between two starts of a key
	full     chan struct{}
	failed   atomic.Uint64
}

const (
	benchKeys    = 1000
	benchBacklog = 3 // jobs queued per key at any time
	benchFeeders = 8
)

func (r *drainBench) onDeliver(e drain.Event) {
	if e.Err != nil {
		r.failed.Add(1)
	}
	select {
	case r.feed <- e.Key:
	default: // feeders behind: the key's backlog shrinks by one
	}
	r.mu.Lock()
	if r.record && len(r.errs) < r.want {
		r.errs = append(r.errs, e.Started.Sub(e.Scheduled))
		if last, ok := r.last[e.Key]; ok {
			r.gaps = append(r.gaps, (e.Started.Sub(last) - r.interval).Abs())
		}
		r.last[e.Key] = e.Started
		if len(r.errs) == r.want {
			close(r.full)
		}
	}
	r.mu.Unlock()
}

func (r *drainBench) admit(ctx context.Context, key string) error {
	id := fmt.Sprintf("%s-%d", key, r.ids.Add(1))
	_, err := r.q.Admit(ctx, queue.Job{ID: id, Key: key, Payload: []byte(id)})
	return err
}

// BenchmarkDrainTiming measures how late deliveries start against their
// slots with 1,000 keys active, at 5/s per key (5,000 deliveries/s in all)
// and at 1/s per key (1,000/s). One op is one delivery, so ns/op is the
// inverse of the achieved total rate (200 µs at 5,000/s, 1 ms at 1,000/s).
func BenchmarkDrainTiming(b *testing.B) {
	for _, rate := range []string{"5/s", "1/s"} {
		b.Run("rate="+strings.Replace(rate, "/s", "Hz", 1), func(b *testing.B) {
			r := newDrainBench(b, rate)
			b.Run(fmt.Sprintf("keys=%d", benchKeys), r.measure)
		})
	}
}

// newDrainBench starts a drainer at rate per key over benchKeys keys and
// returns once every key drains in steady state.
func newDrainBench(b *testing.B, rate string) *drainBench {
	s := testenv.NATS(b)
	nc := testenv.Connect(b, s)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	set, err := policies.Parse("bench.yaml", []byte(fmt.Sprintf(`
policies:
  - name: timing
    outflow: %s
    queue: 10
    overflow: reject
`, rate)))
	if err != nil {
		b.Fatal(err)
	}
	p := set.Policies()[0]
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	r := &drainBench{feed: make(chan string, 1<<16)}
	r.q, err = queue.Open(ctx, js, p.Name, p.Queue, queue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	// Deliveries go to a consumer on another connection that answers each
	// (the default, confirmed delivery), as a downstream consumer would.
	sub, err := testenv.Connect(b, s).Subscribe(p.DeliverSubject()+".>", func(m *nats.Msg) { m.Respond(nil) })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sub.Unsubscribe() })
	sink, err := drain.NewNATSSink(nc, drain.NATSConfig{Subject: p.DeliverSubject()})
	if err != nil {
		b.Fatal(err)
	}
	r.d = drain.New(r.q, sink, paceOf(p), drain.Config{OnDeliver: r.onDeliver})
	r.d.Start(ctx)
	b.Cleanup(r.d.Stop)

	var feeders sync.WaitGroup
	for range benchFeeders {
		feeders.Add(1)
		go func() {
			defer feeders.Done()
			for {
				select {
				case key := <-r.feed:
					if err := r.admit(ctx, key); err != nil && ctx.Err() == nil {
						b.Errorf("admit %s: %v", key, err)
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	b.Cleanup(func() {
		cancel()
		feeders.Wait()
	})

	// Start the keys spread evenly over one interval, so that their slots
	// fall evenly over each interval instead of all at the same instant.
	interval := p.Outflow.Interval()
	r.interval = interval
	start := time.Now()
	var wg sync.WaitGroup
	for g := range benchFeeders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < benchKeys; i += benchFeeders {
				waitUntil(start.Add(time.Duration(i) * interval / benchKeys))
				for range benchBacklog {
					if err := r.admit(ctx, fmt.Sprintf("k%d", i)); err != nil {
						b.Errorf("admit: %v", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	// Every key in steady state: five rounds delivered since.
	rounds := r.d.Stats().Delivered + 5*benchKeys
	waitFor(b, time.Minute, "five rounds of deliveries", func() bool { return r.d.Stats().Delivered >= rounds })
	return r
}

// waitUntil blocks until the wall clock reaches at.
func waitUntil(at time.Time) {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	<-t.C
}

// measure records the timing error of the next b.N deliveries.
func (r *drainBench) measure(b *testing.B) {
	r.mu.Lock()
	r.record, r.want, r.errs, r.full = true, b.N, make([]time.Duration, 0, b.N), make(chan struct{})
	r.last, r.gaps = map[string]time.Time{}, nil
	full := r.full
	r.mu.Unlock()
	failed := r.failed.Load()
	stop := make(chan struct{})
	late := make(chan []time.Duration)
	go timerLateness(stop, late)
	b.ResetTimer()
	select {
	case <-full:
	case <-time.After(time.Duration(b.N)*time.Millisecond + 30*time.Second):
		b.Fatalf("fewer than %d deliveries", b.N)
	}
	b.StopTimer()
	close(stop)
	base := <-late
	r.mu.Lock()
	r.record = false
	lat, gaps := r.errs, r.gaps
	r.mu.Unlock()
	if n := r.failed.Load() - failed; n > 0 {
		b.Fatalf("%d failed deliveries", n)
	}
	b.ReportMetric(quantile(lat, 0.50), "p50-µs")
	b.ReportMetric(quantile(lat, 0.99), "p99-µs")
	b.ReportMetric(quantile(lat, 1), "max-µs")
	b.ReportMetric(quantile(gaps, 0.50), "gap-p50-µs")
	b.ReportMetric(quantile(gaps, 0.99), "gap-p99-µs")
	b.ReportMetric(quantile(base, 0.99), "timer-p99-µs")
}

// timerLateness is the baseline of the timing error: how late a bare Go
// timer fires, every millisecond, on the same process and machine while the
// drainer runs. It sends what it measured on out once stop is closed.
func timerLateness(stop <-chan struct{}, out chan<- []time.Duration) {
	var late []time.Duration
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		due := time.Now().Add(time.Millisecond)
		t.Reset(time.Until(due))
		select {
		case <-t.C:
			late = append(late, time.Since(due))
		case <-stop:
			out <- late
			return
		}
	}
}

// quantile returns the q-quantile of d in microseconds, sorting d.
func quantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[min(int(q*float64(len(d))), len(d)-1)]) / float64(time.Microsecond)
}
