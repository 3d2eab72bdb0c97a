package cluster

import (
	"cmp"
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

func (s *sim) run() {
	end := int64(simDuration)
	for s.q.Len() > 0 && s.violation == "" {
		e := heap.Pop(&s.q).(*simEvent)
		if e.at > end {
			break
		}
		s.now = e.at
		s.events++
		if e.kind == kArrive {
			s.serve(e)
			continue
		}
		if e.kind == kCrash && e.sh < 0 {
			// The holder, as long as another shaper is left.
			e.sh = s.holder()
			if e.sh < 0 || s.alive() < 2 {
				continue
			}
		}
		sh := s.sh[e.sh]
		switch e.kind {
		case kFreeze:
			sh.frozenUntil = max(sh.frozenUntil, s.now+e.dur)
			s.logf("shaper %d frozen for %v", e.sh, time.Duration(e.dur))
			continue
		case kCrash:
			if sh.m != nil {
				s.logf("shaper %d crashes", e.sh)
				sh.m, sh.gen = nil, sh.gen+1
				s.settle(e.sh)
				if s.mode == faulty {
					s.push(&simEvent{at: s.now + s.rng.Int64N(int64(10*time.Second)), kind: kRestart, sh: e.sh})
				}
			}
			continue
		case kRestart:
			if sh.m != nil {
				continue
			}
			sh.runs++
			sh.gen++
			sh.frozenUntil, sh.waiting = 0, false
			sh.m = newLeaseMachine(ttl, fmt.Sprintf("shaper-%d", e.sh), fmt.Sprintf("run-%d", sh.runs))
			if s.sabotage != nil {
				s.sabotage(sh.m)
			}
			s.logf("shaper %d starts run %d", e.sh, sh.runs)
			s.act(e.sh, sh.m.tick(s.local(sh, s.now)))
			continue
		}
		if e.gen != sh.gen || sh.m == nil {
			continue // of an earlier run
		}
		if s.now < sh.frozenUntil {
			e.at = sh.frozenUntil
			s.push(e)
			continue
		}
		now := s.local(sh, s.now)
		switch e.kind {
		case kStop:
			a := sh.m.release(now)
			s.logf("shaper %d stops", e.sh)
			if a.call.op == opDelete {
				s.request(e.sh, a.call)
			}
			sh.m, sh.gen = nil, sh.gen+1
			s.settle(e.sh)
			s.push(&simEvent{at: s.now + s.rng.Int64N(int64(10*time.Second)), kind: kRestart, sh: e.sh})
		case kTimer:
			if e.id == sh.timer && !sh.waiting {
				s.act(e.sh, sh.m.tick(now))
			}
		case kAnswer, kTimeout:
			if !sh.waiting || e.id != sh.call {
				continue // given up on, or answered already
			}
			sh.waiting = false
			res := e.res
			if e.kind == kTimeout {
				res = kvResult{outcome: outFailed}
			}
			s.logf("shaper %d: %v", e.sh, res.outcome)
			was := sh.m.Deadline()
			s.act(e.sh, sh.m.observe(now, res))
			if s.pounce && sh.m.held() && !sh.m.Deadline().Equal(was) && s.rng.IntN(8) == 0 {
				// Frozen the moment a write is answered, until past its end.
				d := ttl - ttl/12 + time.Duration(s.rng.Int64N(int64(3*time.Second)))
				sh.frozenUntil = s.now + int64(d)
				s.logf("shaper %d frozen for %v after a write", e.sh, d)
			}
		}
	}
	for i := range s.sh {
		s.now = min(s.now, end)
		sh := s.sh[i]
		if sh.open {
			s.done = append(s.done, interval{sh.from, min(sh.to, end), i})
			sh.open = false
		}
	}
	if s.violation == "" {
		s.checkIntervals()
	}
}

// holder returns the shaper holding the lease now, or -1.
func (s *sim) holder() int {
	for i, sh := range s.sh {
		if sh.m != nil && sh.m.Holding(s.local(sh, s.now)) {
			return i
		}
	}
	return -1
}

// alive returns how many shapers run.
func (s *sim) alive() int {
	n := 0
	for _, sh := range s.sh {
		if sh.m != nil {
			n++
		}
	}
	return n
}

// act carries out what shaper i's machine asked for.
func (s *sim) act(i int, a leaseAction) {
	sh := s.sh[i]
	if a.event == evTaken {
		s.takes++
		s.logf("shaper %d takes the lease until %v", i, time.Duration(s.real(sh, sh.m.Deadline())))
	}
	if a.event == evLost {
		s.logf("shaper %d loses the lease: %s", i, a.why)
	}
	if a.call.op != opNone {
		sh.call++
		sh.waiting = true
		s.request(i, a.call)
		timeout := s.real(sh, s.local(sh, s.now).Add(sh.m.t.request)) + 1
		s.push(&simEvent{at: timeout, kind: kTimeout, sh: i, gen: sh.gen, id: sh.call})
	} else {
		sh.timer++
		s.push(&simEvent{at: max(s.real(sh, a.wake)+1, s.now), kind: kTimer, sh: i, gen: sh.gen, id: sh.timer})
	}
	s.settle(i)
}

// request sends call from shaper i, unless the network loses it.
func (s *sim) request(i int, call kvCall) {
	sh := s.sh[i]
	s.logf("shaper %d sends %v rev %d", i, call.op, call.rev)
	if s.mode == faulty && s.rng.Float64() < 0.01 {
		return
	}
	s.push(&simEvent{at: s.now + s.latency(), kind: kArrive, sh: i, gen: sh.gen, id: sh.call, call: call})
}

func (s *sim) latency() int64 {
	r := s.rng
	if s.tight {
		return int64(10*time.Microsecond) + r.Int64N(int64(200*time.Microsecond))
	}
	if s.mode != faulty {
		return int64(100*time.Microsecond) + r.Int64N(int64(20*time.Millisecond))
	}
	switch p := r.Float64(); {
	case p < 0.9:
		return int64(100*time.Microsecond) + r.Int64N(int64(20*time.Millisecond))
	case p < 0.98:
		return r.Int64N(int64(500 * time.Millisecond))
	default:
		return r.Int64N(int64(3 * time.Second))
	}
}

// serve applies a request that reaches the bucket and sends its answer.
func (s *sim) serve(e *simEvent) {
	var res kvResult
	down := false
	for _, o := range s.outages {
		down = down || o[0] <= s.now && s.now < o[1]
	}
	switch {
	case down && s.rng.IntN(2) == 0:
		return // no answer
	case down, s.mode == faulty && s.rng.Float64() < 0.02:
		res = kvResult{outcome: outFailed}
	default:
		res = s.kv.apply(s, e.call)
		s.logf("bucket: %v rev %d from shaper %d: %v (entry %v rev %d)", e.call.op, e.call.rev, e.sh, res.outcome, s.kv.exists, s.kv.rev)
	}
	if s.mode == faulty && s.rng.Float64() < 0.02 {
		return // the answer is lost
	}
	s.push(&simEvent{at: s.now + s.latency(), kind: kAnswer, sh: e.sh, gen: e.gen, id: e.id, res: res})
}

func (kv *simKV) apply(s *sim, c kvCall) kvResult {
	if kv.exists && s.now >= kv.expireAt {
		kv.exists, kv.rev = false, 0
		s.logf("bucket: the entry expired")
	}
	store := func() kvResult {
		kv.last++
		kv.exists, kv.value, kv.rev = true, c.value, kv.last
		early := s.rng.Int64N(int64(earlyExpiry))
		if s.tight {
			early = int64(earlyExpiry)
		}
		kv.expireAt = s.now + int64(float64(int64(ttl)-early)/kv.rate)
		return kvResult{outcome: outOK, rev: kv.rev}
	}
	switch c.op {
	case opCreate:
		if kv.exists {
			return kvResult{outcome: outExists}
		}
		return store()
	case opGet:
		if !kv.exists {
			return kvResult{outcome: outNotFound}
		}
		return kvResult{outcome: outOK, rev: kv.rev, value: kv.value}
	case opUpdate:
		if !kv.exists || kv.rev != c.rev {
			return kvResult{outcome: outMismatch}
		}
		return store()
	case opDelete:
		if !kv.exists || kv.rev != c.rev {
			return kvResult{outcome: outMismatch}
		}
		kv.last++
		kv.exists, kv.rev = false, kv.last // the delete marker
		return kvResult{outcome: outOK}
	}
	return kvResult{outcome: outFailed}
}

// settle recomputes shaper i's holding interval after a step at s.now, and
// checks that nobody else holds the lease at this instant.
func (s *sim) settle(i int) {
	sh := s.sh[i]
	if sh.open {
		if to := min(sh.to, s.now); to > sh.from {
			s.done = append(s.done, interval{sh.from, to, i})
		}
		sh.open = false
	}
	if sh.m != nil && sh.m.held() {
		if to := s.real(sh, sh.m.Deadline()); to > s.now {
			sh.open, sh.from, sh.to = true, s.now, to
		}
	}
	holders := 0
	for _, o := range s.sh {
		if o.m != nil && o.m.Holding(s.local(o, s.now)) {
			holders++
		}
	}
	if holders > 1 {
		s.violation = fmt.Sprintf("%d shapers hold the lease at %v", holders, time.Duration(s.now))
	}
}

// checkIntervals looks for two shapers' holding intervals that overlap:
// every instant between events, deadlines included.
func (s *sim) checkIntervals() {
	all := slices.Clone(s.done)
	slices.SortFunc(all, func(a, b interval) int { return cmp.Compare(a.from, b.from) })
	var last interval
	s.slack = math.MaxInt64
	for i, iv := range all {
		if i > 0 && iv.sh != last.sh {
			s.slack = min(s.slack, iv.from-last.to)
		}
		if iv.from < last.to && iv.sh != last.sh {
			s.violation = fmt.Sprintf("shaper %d holds the lease from %v to %v, shaper %d from %v to %v",
				last.sh, time.Duration(last.from), time.Duration(last.to), iv.sh, time.Duration(iv.from), time.Duration(iv.to))
			return
		}
		if iv.to > last.to {
			last = iv
		}
	}
}

// heldFraction is the part of the schedule in which someone held the lease.
func (s *sim) heldFraction() float64 {
	var sum int64
	for _, iv := range s.done {
		sum += iv.to - iv.from
	}
	return float64(sum) / float64(simDuration)
}

// longestGap returns the longest time nobody held the lease between its
// first taking and the end, and when it began.
func (s *sim) longestGap() (time.Duration, time.Duration) {
	all := slices.Clone(s.done)
	if len(all) == 0 {
		return simDuration, 0
	}
	slices.SortFunc(all, func(a, b interval) int { return cmp.Compare(a.from, b.from) })
	var gap, at int64
	reach := all[0].to
	for _, iv := range all[1:] {
		if iv.from > reach && iv.from-reach > gap {
			gap, at = iv.from-reach, reach
		}
		reach = max(reach, iv.to)
	}
	if end := int64(simDuration); end-reach > gap {
		gap, at = end-reach, reach
	}
	return time.Duration(gap), time.Duration(at)
}
