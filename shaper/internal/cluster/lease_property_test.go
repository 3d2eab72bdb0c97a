package cluster

import (
	"container/heap"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The property test runs many shapers' lease machines on one virtual
// timeline against a simulated bucket, with everything the lease must
// survive drawn at random, and checks that the real-time intervals in
// which each shaper's Holding(its own clock's now) is true never overlap.
//
// What a schedule draws, within the bounds leasemachine.go assumes:
//   - 2 to 5 shapers, each with a clock rate error within ±0.1 % and an
//     offset of up to an hour;
//   - a bucket whose entries the server removes by its own clock (rate
//     error within ±0.1 %), up to 0.4 s early (a server whose wall clock is
//     ahead of the one that stored the entry);
//   - a latency for every request and every answer: mostly milliseconds,
//     sometimes half a second, now and then up to 3 s (past the caller's
//     1 s timeout, so a write can be stored after its sender gave up);
//   - requests and answers lost (the caller times out, and cannot tell
//     whether its write was stored), transient errors, and outages of the
//     bucket of up to 8 s (an election);
//   - freezes of up to 15 s (a stopped process, a GC pause, a stalled VM):
//     a frozen shaper handles nothing until it wakes, and its clock runs
//     on;
//   - crashes and graceful stops, each followed by a restart under the
//     same instance id (a new run).
var (
	propSeed      = flag.Uint64("lease.seed", 0, "run only the lease property test's schedule with this seed")
	propSchedules = flag.Int("lease.schedules", 5000, "schedules the lease property test runs")
)

const (
	maxRateError = 0.001
	earlyExpiry  = 400 * time.Millisecond
	simDuration  = 90 * time.Second
)

// TestLeasePropertyNeverTwoHolders runs thousands of randomized schedules
// and fails, printing the seed and the schedule's last events, at the first
// instant two shapers hold the lease.
func TestLeasePropertyNeverTwoHolders(t *testing.T) {
	start := time.Now()
	seeds := schedules(false)
	var held, events, takes float64
	slack, slackSeed := int64(math.MaxInt64), uint64(0)
	for _, seed := range seeds {
		s := newSim(seed, faulty)
		s.run()
		if s.violation != "" {
			t.Fatalf("seed %d (rerun: go test -run Property -lease.seed=%d -v): %s\n%s", seed, seed, s.violation, replay(seed, faulty))
		}
		if s.slack < slack {
			slack, slackSeed = s.slack, seed
		}
		held += s.heldFraction()
		events += float64(s.events)
		takes += float64(s.takes)
	}
	n := float64(len(seeds))
	t.Logf("%d schedules of %v in %v (%.0f events and %.1f hand-overs a schedule): never two holders; someone held the lease %.1f %% of the time",
		len(seeds), simDuration, time.Since(start).Round(time.Millisecond), events/n, takes/n, 100*held/n)
	t.Logf("closest hand-over: %v between one holding's end and the next's start (seed %d)", time.Duration(slack), slackSeed)
}

// TestLeasePropertyLiveness: when the bucket answers and nobody freezes,
// the lease is held from its first taking to the end without a gap; when
// the holder crashes, another takes it within the TTL and a look.
func TestLeasePropertyLiveness(t *testing.T) {
	seeds := schedules(false)
	for _, seed := range seeds[:len(seeds)/4+1] {
		s := newSim(seed, calm)
		s.run()
		if s.violation != "" {
			t.Fatalf("seed %d: %s\n%s", seed, s.violation, replay(seed, calm))
		}
		if gap, at := s.longestGap(); gap > 0 {
			t.Fatalf("seed %d: nobody held the lease for %v from %v, with the bucket answering and nobody frozen\n%s", seed, gap, at, replay(seed, calm))
		}
		s = newSim(seed, crashing)
		s.run()
		if s.violation != "" {
			t.Fatalf("seed %d: %s\n%s", seed, s.violation, replay(seed, crashing))
		}
		if gap, at := s.longestGap(); gap > ttl+500*time.Millisecond {
			t.Fatalf("seed %d: nobody held the lease for %v from %v, with holders crashing; want at most the TTL and a look\n%s", seed, gap, at, replay(seed, crashing))
		}
	}
}

// TestLeasePropertyFindsOverlaps checks the checker: with a deadline
// later, or a take-over earlier, than leasemachine.go argues for, the
// schedules must find two holders.
func TestLeasePropertyFindsOverlaps(t *testing.T) {
	for _, c := range []struct {
		name  string
		sabot func(*leaseMachine)
	}{
		{"deadline a TTL after the send, no margin", func(m *leaseMachine) { m.t.margin = 0 }},
		{"a margin of 0.4 s: no room for the clocks' rates", func(m *leaseMachine) { m.t.margin = earlyExpiry }},
		{"deadline a TTL and a half after the send", func(m *leaseMachine) { m.t.margin = -ttl / 2 }},
		{"take-over once the revision is unchanged for TTL − margin", func(m *leaseMachine) { m.t.unmoved = m.t.ttl - m.t.margin }},
	} {
		found := ""
		seeds := schedules(true) // it stops at the first found
		for i, seed := range seeds {
			s := newSim(seed, faulty)
			s.sabotage = c.sabot
			s.run()
			if s.violation != "" {
				found = fmt.Sprintf("schedule %d of %d (seed %d): %s", i+1, len(seeds), seed, s.violation)
				break
			}
		}
		if found == "" {
			t.Errorf("%s: no schedule found two holders; the property test would not see this bug", c.name)
		}
		t.Logf("%s: found by %s", c.name, found)
	}
}

// schedules returns the seeds of the schedules to run: -lease.schedules
// of them, a tenth with -short unless all, or the one -lease.seed names.
func schedules(all bool) []uint64 {
	if *propSeed != 0 {
		return []uint64{*propSeed}
	}
	n := *propSchedules
	if testing.Short() && !all {
		n /= 10
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// mode is what a schedule may draw.
type mode int

const (
	faulty   mode = iota // everything
	calm                 // short latencies, nothing lost, no outage, freeze or crash
	crashing             // calm, but holders crash and do not come back
)

// Events of the simulation.
type simKind int

const (
	kArrive  simKind = iota // a request reaches the bucket
	kAnswer                 // its answer reaches the shaper
	kTimeout                // the shaper gives up on a call
	kTimer                  // a machine's wake-up
	kFreeze                 // a shaper stops for dur
	kCrash                  // a shaper dies (SIGKILL)
	kStop                   // a shaper stops gracefully
	kRestart                // a new run of the shaper starts
)

type simEvent struct {
	at   int64 // real time, ns
	orig int64 // when it was first due: order of events deferred by a freeze
	seq  int
	kind simKind
	sh   int
	gen  int // the run it belongs to
	id   int // call or timer
	call kvCall
	res  kvResult
	dur  int64
}

type eventHeap []*simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.orig != b.orig {
		return a.orig < b.orig
	}
	return a.seq < b.seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// simShaper is one shaper: its clock, its current run's machine, and the
// real-time interval it holds the lease in as last computed.
type simShaper struct {
	rate        float64 // its clock's seconds per real second
	off         int64   // its clock at real time 0
	m           *leaseMachine
	gen, runs   int
	call        int  // the call in flight
	waiting     bool // for its answer
	timer       int  // the live timer
	frozenUntil int64
	open        bool
	from, to    int64
}

// simKV is the bucket, reduced to the lease's entry.
type simKV struct {
	exists   bool
	value    []byte
	rev      uint64
	last     uint64
	expireAt int64
	rate     float64 // the server's clock's seconds per real second
}

type interval struct {
	from, to int64
	sh       int
}

type sim struct {
	rng      *rand.Rand
	mode     mode
	sabotage func(*leaseMachine)
	base     time.Time
	now      int64
	q        eventHeap
	seq      int
	sh       []*simShaper
	kv       simKV
	outages  [][2]int64
	done     []interval
	trace    []string
	tracing  bool

	violation string
	events    int
	takes     int
	slack     int64 // the least time between one shaper's holding and another's
	tight     bool  // latencies of microseconds, clocks at their bounds
	pounce    bool  // freeze holders right after a successful write
}

func newSim(seed uint64, md mode) *sim {
	s := &sim{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), mode: md, base: t0}
	r := s.rng
	n := 2 + r.IntN(4)
	rate := func() float64 { return 1 + (2*r.Float64()-1)*maxRateError }
	if md == faulty && r.IntN(4) == 0 {
		// The bounds: every clock as fast or as slow as assumed, answers
		// in microseconds, holders frozen right after a renewal.
		s.tight, s.pounce = true, true
		rate = func() float64 { return 1 + float64(2*r.IntN(2)-1)*maxRateError }
	}
	s.pounce = s.pounce || md == faulty && r.IntN(4) == 0
	s.kv.rate = rate()
	for range n {
		sh := &simShaper{rate: rate(), off: int64((2*r.Float64() - 1) * float64(time.Hour))}
		s.sh = append(s.sh, sh)
	}
	end := int64(simDuration)
	for i := range s.sh {
		// Shapers start within the first 3 s.
		s.push(&simEvent{at: r.Int64N(int64(3 * time.Second)), kind: kRestart, sh: i})
	}
	switch md {
	case faulty:
		for i := range s.sh {
			for at := s.expo(30 * time.Second); at < end; at += s.expo(30 * time.Second) {
				d := time.Duration(r.Int64N(int64(3 * time.Second)))
				if r.IntN(2) == 0 {
					d = 3*time.Second + time.Duration(r.Int64N(int64(12*time.Second)))
				}
				s.push(&simEvent{at: at, kind: kFreeze, sh: i, dur: int64(d)})
			}
			for at := s.expo(60 * time.Second); at < end; at += s.expo(60 * time.Second) {
				k := kCrash
				if r.IntN(2) == 0 {
					k = kStop
				}
				s.push(&simEvent{at: at, kind: k, sh: i})
			}
		}
		for range r.IntN(3) {
			a := r.Int64N(end)
			s.outages = append(s.outages, [2]int64{a, a + int64(500*time.Millisecond) + r.Int64N(int64(7500*time.Millisecond))})
		}
	case crashing:
		s.push(&simEvent{at: int64(20 * time.Second), kind: kCrash, sh: -1})
		s.push(&simEvent{at: int64(50 * time.Second), kind: kCrash, sh: -1})
	}
	return s
}

func (s *sim) expo(mean time.Duration) int64 {
	return int64(s.rng.ExpFloat64() * float64(mean))
}

func (s *sim) push(e *simEvent) {
	s.seq++
	e.seq = s.seq
	if e.orig == 0 {
		e.orig = e.at
	}
	heap.Push(&s.q, e)
}

// local is shaper sh's clock at real time at.
func (s *sim) local(sh *simShaper, at int64) time.Time {
	return s.base.Add(time.Duration(sh.off + int64(math.Round(float64(at)*sh.rate))))
}

// real is the real time at which shaper sh's clock reads t, rounded down.
func (s *sim) real(sh *simShaper, t time.Time) int64 {
	return int64(math.Floor(float64(int64(t.Sub(s.base))-sh.off) / sh.rate))
}

// replay runs schedule seed again, tracing it (the run is the same: tracing
// draws nothing), and returns its last events.
func replay(seed uint64, md mode) string {
	s := newSim(seed, md)
	s.tracing = true
	s.run()
	return s.traceTail()
}

func (s *sim) logf(format string, args ...any) {
	if !s.tracing {
		return
	}
	s.trace = append(s.trace, fmt.Sprintf("%12.6fs ", float64(s.now)/1e9)+fmt.Sprintf(format, args...))
	if len(s.trace) > 400 {
		s.trace = slices.Delete(s.trace, 0, 200)
	}
}

func (s *sim) traceTail() string {
	tail := s.trace
	if len(tail) > 80 {
		tail = tail[len(tail)-80:]
	}
	return strings.Join(tail, "\n")
}
