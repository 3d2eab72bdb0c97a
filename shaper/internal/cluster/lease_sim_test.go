package cluster

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"time"
)

// The simulation of lease_property_test.go: how a run goes, how a
// shaper acts on its machine's actions, how the bucket answers, and what
// the checks read of a run.

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
