package drain_test

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// flightLog is a downstream that takes latency to answer each delivery,
// and counts the deliveries awaiting their answer, per key and in all, as
// each starts.
type flightLog struct {
	mu      sync.Mutex
	latency time.Duration
	fail    func(d *drain.Delivery) error // nil: every delivery succeeds
	perKey  map[string]int
	total   int
	starts  []flightStart
}

// flightStart is one delivery's start, with what was in the air then,
// itself included.
type flightStart struct {
	key, id      string
	at           time.Time
	ofKey, ofAll int
	stillStored  int // deliveries of the key handed over before and still stored
	attempt      int
}

func newFlightLog(r *memRig, latency time.Duration) *flightLog {
	l := &flightLog{latency: latency, perKey: map[string]int{}}
	handed := map[string][]uint64{}
	r.sink.setFail(func(d *drain.Delivery) error {
		l.mu.Lock()
		l.perKey[d.Msg.Key]++
		l.total++
		stored := 0
		for _, seq := range handed[d.Token] {
			if _, err := r.q.Get(r.t.Context(), d.Token, seq); err == nil {
				stored++
			}
		}
		handed[d.Token] = append(handed[d.Token], d.Msg.Seq)
		l.starts = append(l.starts, flightStart{key: d.Msg.Key, id: d.Msg.ID, at: time.Now(), ofKey: l.perKey[d.Msg.Key],
			ofAll: l.total, stillStored: stored, attempt: d.Msg.Attempt})
		fail := l.fail
		l.mu.Unlock()
		time.Sleep(l.latency)
		l.mu.Lock()
		l.perKey[d.Msg.Key]--
		l.total--
		l.mu.Unlock()
		if fail != nil {
			return fail(d)
		}
		return nil
	})
	return l
}

func (l *flightLog) log() []flightStart {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.starts)
}

func (l *flightLog) of(key string) []flightStart {
	var got []flightStart
	for _, s := range l.log() {
		if s.key == key {
			got = append(got, s)
		}
	}
	return got
}

// asDeliveries returns the starts as the deliveries of rig_test.go.
func asDeliveries(ss []flightStart) []delivery {
	ds := make([]delivery, len(ss))
	for i, s := range ss {
		ds[i] = delivery{key: s.key, id: s.id, attempt: s.attempt, at: s.at}
	}
	return ds
}

// checkOutflowBound checks the per-key bound: in any window T at most
// ⌈T/interval⌉+1 starts.
func checkOutflowBound(t *testing.T, key string, ss []flightStart, interval time.Duration) {
	t.Helper()
	for _, w := range []time.Duration{interval, 3 * interval, 10 * interval, 50 * interval} {
		limit := int(math.Ceil(float64(w)/float64(interval))) + 1
		if got := maxInWindow(asDeliveries(ss), w); got > limit {
			t.Errorf("key %s: %d starts within %v, want at most %d", key, got, w, limit)
		}
	}
}

// With Key 2 and receipts slower than the key's slots, a key has at most
// two deliveries awaiting their receipt, starts its jobs in order, and
// reaches two per receipt latency — here 4/s of its 10/s outflow —
// without ever exceeding its outflow.
func TestConcurrencyKeyBoundsInFlight(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			interval, latency := 100*time.Millisecond, 500*time.Millisecond
			r := newMemRig(t, 100, drain.Pace{Interval: interval, Concurrency: drain.Concurrency{Key: 2}}, drain.Config{})
			l := newFlightLog(r, latency)
			ids := map[string][]string{}
			for _, key := range []string{"a", "b", "c"} {
				ids[key] = r.admit(key, 21)
			}
			r.d.Start(t.Context())
			r.sink.wait(t, 63, time.Minute)
			for key, want := range ids {
				ss := l.of(key)
				got := make([]string, len(ss))
				for i, s := range ss {
					got[i] = s.id
					if s.ofKey > 2 {
						t.Errorf("key %s: %d deliveries awaiting receipt when %s started, want at most 2", key, s.ofKey, s.id)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("key %s started %v, want %v (FIFO)", key, got, want)
				}
				if top := slices.MaxFunc(ss, func(a, b flightStart) int { return a.ofKey - b.ofKey }); top.ofKey != 2 {
					t.Errorf("key %s: at most %d deliveries awaiting receipt, want 2: the limit never filled", key, top.ofKey)
				}
				checkOutflowBound(t, key, ss, interval)
				// 20 gaps at 4/s: 5 s.
				span := ss[len(ss)-1].at.Sub(ss[0].at)
				if rate := 20 / span.Seconds(); rate < 3.6 || rate > 4.4 {
					t.Errorf("key %s: %.2f/s over %v, want 4/s ±10%%", key, rate, span)
				}
			}
			checkSettled(t, r)
		})
	})
}

// With Total 4 the keys together have at most four deliveries awaiting
// their receipt, and no place is left unused: every receipt lets the key
// due first start at once.
func TestConcurrencyTotalBoundsInFlight(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			interval, latency := 10*time.Millisecond, 500*time.Millisecond
			r := newMemRig(t, 100, drain.Pace{Interval: interval, Concurrency: drain.Concurrency{Key: 3, Total: 4}}, drain.Config{})
			l := newFlightLog(r, latency)
			for i := range 5 {
				r.admit(fmt.Sprint("k", i), 8)
			}
			r.d.Start(t.Context())
			r.sink.wait(t, 40, time.Minute)
			ss := l.log()
			top := 0
			for _, s := range ss {
				top = max(top, s.ofAll)
				if s.ofKey > 3 {
					t.Errorf("%s: %d deliveries of its key awaiting receipt, want at most 3", s.id, s.ofKey)
				}
			}
			if top != 4 {
				t.Errorf("at most %d deliveries awaiting receipt, want 4", top)
			}
			// 40 jobs, 4 at a time, 500 ms each: 10 rounds, the last
			// starting 4.5 s after the first.
			if span := ss[len(ss)-1].at.Sub(ss[0].at); span > 4500*time.Millisecond+5*interval {
				t.Errorf("40 deliveries took %v from first to last start, want 4.5s: places were left unused", span)
			}
			checkSettled(t, r)
			if st := r.d.Stats(); st.Delivered != 40 {
				t.Errorf("Stats = %+v, want 40 delivered", st)
			}
		})
	})
}

// A key never hands a job over while as many of its jobs handed over
// before are still stored as its limit less one: a crash delivers at most
// Key jobs of a key again.
func TestConcurrencyCrashBound(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			r := newMemRig(t, 100, drain.Pace{Interval: 10 * time.Millisecond, Concurrency: drain.Concurrency{Key: 3}}, drain.Config{Workers: 8})
			l := newFlightLog(r, 45*time.Millisecond)
			for i := range 4 {
				r.admit(fmt.Sprint("k", i), 25)
			}
			r.d.Start(t.Context())
			r.sink.wait(t, 100, time.Minute)
			for _, s := range l.log() {
				if s.stillStored > 2 {
					t.Errorf("%s handed over while %d of its key's delivered jobs were still stored, want at most 2", s.id, s.stillStored)
				}
			}
		})
	})
}

// A Group gives each partition an equal share of Concurrency.Total,
// rounded up and at least one; Key stays as it is.
func TestConcurrencyGroupShares(t *testing.T) {
	q, err := drain.NewMemQueue("p", 10, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ total, parts, want int }{{10, 1, 10}, {10, 4, 3}, {8, 4, 2}, {3, 8, 1}, {0, 4, 0}} {
		g := drain.NewGroup(q, tt.parts, newRecorder(), drain.Pace{Concurrency: drain.Concurrency{Key: 2, Total: tt.total}}, drain.Config{Passive: true})
		for i := range tt.parts {
			if got := g.Part(i).Pace().Concurrency; got != (drain.Concurrency{Key: 2, Total: tt.want}) {
				t.Errorf("total %d over %d partitions: partition %d has %+v, want key 2, total %d", tt.total, tt.parts, i, got, tt.want)
			}
		}
		g.Stop()
	}
}

// checkSettled checks that once every job was delivered and answered,
// every slot is freed and nothing is in flight.
func checkSettled(t *testing.T, r *memRig) {
	t.Helper()
	elapse(2 * time.Second)
	if st := r.d.Stats(); st.Queued != 0 || st.InFlight != 0 || st.Keys != 0 {
		t.Errorf("Stats() once all was delivered = %+v, want nothing queued or in flight", st)
	}
}

// The schedule counts Concurrency.Total too: four keys sharing four
// deliveries awaiting 500 ms receipts go at 2/s each, and StartIn says
// so, within 15 %.
func TestConcurrencyStartInCountsTotal(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			latency := 500 * time.Millisecond
			r := newMemRig(t, 100, drain.Pace{Interval: 10 * time.Millisecond, Concurrency: drain.Concurrency{Key: 2, Total: 4}}, drain.Config{})
			l := newFlightLog(r, latency)
			for k := range 4 {
				r.admit(fmt.Sprint("k", k), 24)
			}
			r.d.Start(t.Context())
			const n = 8
			eta, actual := startInAndStart(t, r, l, "k0", n, 96)
			t.Logf("StartIn(%d) = %v; the job started after %v", n, eta, actual)
			if diff := (eta - actual).Abs(); diff > actual*15/100 {
				t.Errorf("StartIn(%d) = %v, the job started after %v, want within 15%%", n, eta, actual)
			}
		})
	})
}

// startInAndStart lets 2 s pass, asks StartIn for key's n-th job not yet
// attempted, waits until all jobs (of every key) are delivered, and
// returns the answer and when that job started, from the time asked.
func startInAndStart(t *testing.T, r *memRig, l *flightLog, key string, n int64, all int) (eta, actual time.Duration) {
	t.Helper()
	elapse(2*time.Second + 50*time.Millisecond)
	token, err := queue.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	eta = r.d.StartIn(token, n, now)
	started := len(l.of(key))
	r.sink.wait(t, all, time.Minute)
	return eta, l.of(key)[started+int(n)-1].at.Sub(now)
}
