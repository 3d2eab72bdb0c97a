package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

// The lease machine's tests run on a virtual clock: instants are offsets
// from t0, with the default lease of 6 s (renewals every 2 s, retries
// after 0.5 s, watching every 0.2 s, a holding ending 5.5 s after its write
// was sent).
const (
	ttl   = 6 * time.Second
	ms    = time.Millisecond
	never = -1 // a deadline wanted zero: not holding
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func holderOf(instance, run string) []byte {
	b, _ := json.Marshal(holderValue{Instance: instance, Run: run})
	return b
}

var (
	ours      = holderOf("a", "run-1")
	other     = holderOf("b", "run-9")
	newerRun  = holderOf("a", "run-2")
	earlier   = holderOf("a", "run-0")
	bareOld   = []byte("a") // an earlier version's value: the instance id
	errTimout = errors.New("context deadline exceeded")
)

func ok(rev uint64) kvResult                { return kvResult{outcome: outOK, rev: rev} }
func got(rev uint64, v []byte) kvResult     { return kvResult{outcome: outOK, rev: rev, value: v} }
func is(o outcome) kvResult                 { return kvResult{outcome: o} }
func failedWith(err error) kvResult         { return kvResult{outcome: outFailed, err: err} }
func probe(at time.Duration, on bool) check { return check{at, on} }

// check is a Holding(t0+at) wanted after a step.
type check struct {
	at time.Duration
	on bool
}

// mstep is one step of a machine: a tick (or a release) at at, or the
// answer res to the call in flight received at at, and what it must ask
// for next.
type mstep struct {
	at      time.Duration
	tick    bool
	release bool
	res     kvResult

	call  kvOp          // the next call; opNone: a wake
	rev   uint64        // the revision it expects
	wake  time.Duration // when call is opNone
	ev    leaseEvent
	until time.Duration // the deadline wanted (never: not holding)
	holds []check
}

// holder is the steps that take the lease on creating it at 0 (revision
// 1, deadline 5.5 s), continued by each case.
func holder(rest ...mstep) []mstep {
	return append([]mstep{
		{at: 0, tick: true, call: opCreate, until: never},
		{at: 50 * ms, res: ok(1), wake: 2 * time.Second, ev: evTaken, until: 5500 * ms},
	}, rest...)
}

var machineCases = []struct {
	name  string
	run   string // default run-1
	steps []mstep
}{
	{"take on create", "", holder(
		mstep{at: 2 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms,
			holds: []check{probe(5499*ms, true), probe(5500*ms, false)}},
	)},
	{"renew: the deadline counts from the renewal's send", "", holder(
		mstep{at: 2 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		// Answered late: the deadline is 2 s + 5.5 s, not 4.9 s + 5.5 s.
		mstep{at: 4900 * ms, res: ok(5), wake: 4900 * ms, until: 7500 * ms,
			holds: []check{probe(7499*ms, true), probe(7500*ms, false)}},
		mstep{at: 4900 * ms, tick: true, call: opUpdate, rev: 5, until: 7500 * ms},
		mstep{at: 4950 * ms, res: ok(6), wake: 6900 * ms, until: 10400 * ms},
	)},
	{"renewal stored but not answered is recognised", "", holder(
		mstep{at: 2 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 3 * time.Second, res: failedWith(errTimout), wake: 3500 * ms, ev: evFailing, until: 5500 * ms},
		mstep{at: 3500 * ms, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 3520 * ms, res: is(outMismatch), call: opGet, until: 5500 * ms},
		mstep{at: 3540 * ms, res: got(7, ours), call: opUpdate, rev: 7, until: 5500 * ms},
		mstep{at: 3560 * ms, res: ok(8), wake: 5540 * ms, ev: evRecovered, until: 9040 * ms},
	)},
	{"renewals failing: still the holder, delivering nothing past the deadline, then recovering", "", holder(
		mstep{at: 2 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 3 * time.Second, res: failedWith(errTimout), wake: 3500 * ms, ev: evFailing, until: 5500 * ms},
		mstep{at: 3500 * ms, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 4500 * ms, res: failedWith(errTimout), wake: 5 * time.Second, until: 5500 * ms},
		mstep{at: 5 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 6 * time.Second, res: failedWith(errTimout), wake: 6500 * ms, until: 5500 * ms,
			holds: []check{probe(5400*ms, true), probe(6*time.Second, false)}},
		mstep{at: 6500 * ms, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		// Nobody wrote since revision 1: nobody held it meanwhile. No
		// evTaken: the drain goes on without reading every key again.
		mstep{at: 6600 * ms, res: ok(2), wake: 8500 * ms, ev: evRecovered, until: 12 * time.Second,
			holds: []check{probe(6600*ms, true)}},
	)},
	{"another shaper's entry at a renewal ends the holding", "", holder(
		mstep{at: 2 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 2010 * ms, res: is(outMismatch), call: opGet, until: 5500 * ms},
		mstep{at: 2020 * ms, res: got(4, other), wake: 4020 * ms, ev: evLost, until: never,
			holds: []check{probe(2020*ms, false)}},
	)},
	{"entry expired during failing renewals: created again, still the holder", "", holder(
		mstep{at: 2 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 3 * time.Second, res: failedWith(errTimout), wake: 3500 * ms, ev: evFailing, until: 5500 * ms},
		mstep{at: 7 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms,
			holds: []check{probe(7*time.Second, false)}},
		mstep{at: 7010 * ms, res: is(outMismatch), call: opGet, until: 5500 * ms},
		mstep{at: 7020 * ms, res: is(outNotFound), call: opCreate, until: 5500 * ms},
		mstep{at: 7030 * ms, res: ok(9), wake: 9020 * ms, ev: evRecovered, until: 12520 * ms},
	)},
	{"entry expired and taken by another: lost", "", holder(
		mstep{at: 7 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 7010 * ms, res: is(outMismatch), call: opGet, until: 5500 * ms},
		mstep{at: 7020 * ms, res: is(outNotFound), call: opCreate, until: 5500 * ms},
		mstep{at: 7030 * ms, res: is(outExists), call: opGet, until: 5500 * ms},
		mstep{at: 7040 * ms, res: got(10, other), wake: 9040 * ms, ev: evLost, until: never},
	)},
	{"holder frozen past its deadline wakes delivering nothing, and loses", "", holder(
		// Due to renew at 2 s, it runs again at 11 s.
		mstep{at: 11 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms,
			holds: []check{probe(11*time.Second, false)}},
		mstep{at: 11010 * ms, res: is(outMismatch), call: opGet, until: 5500 * ms},
		mstep{at: 11020 * ms, res: got(6, other), wake: 13020 * ms, ev: evLost, until: never},
	)},
	{"holder frozen past its deadline, nobody took it: renewed", "", holder(
		mstep{at: 5200 * ms, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 5800 * ms, res: ok(2), wake: 7200 * ms, until: 10700 * ms,
			holds: []check{probe(5800*ms, true)}},
	)},
	{"standby takes over after seeing the revision unchanged for a TTL", "", []mstep{
		{at: 0, tick: true, call: opCreate, until: never},
		{at: 10 * ms, res: is(outExists), call: opGet, until: never},
		{at: 100 * ms, res: got(3, other), wake: 2100 * ms, until: never},
		{at: 2100 * ms, tick: true, call: opCreate, until: never},
		{at: 2110 * ms, res: is(outExists), call: opGet, until: never},
		{at: 2120 * ms, res: got(3, other), wake: 2320 * ms, until: never}, // stopped changing: watch
		{at: 6 * time.Second, tick: true, call: opCreate, until: never},
		{at: 6010 * ms, res: is(outExists), call: opGet, until: never},
		{at: 6050 * ms, res: got(3, other), wake: 6250 * ms, until: never}, // 5.95 s unchanged
		{at: 6250 * ms, tick: true, call: opCreate, until: never},
		{at: 6260 * ms, res: is(outExists), call: opGet, until: never},
		{at: 6270 * ms, res: got(3, other), call: opUpdate, rev: 3, until: never},
		{at: 6280 * ms, res: ok(4), wake: 8270 * ms, ev: evTaken, until: 11770 * ms},
	}},
	{"standby: a holder that renews keeps it", "", []mstep{
		{at: 0, tick: true, call: opCreate, until: never},
		{at: 10 * ms, res: is(outExists), call: opGet, until: never},
		{at: 20 * ms, res: got(3, other), wake: 2020 * ms, until: never},
		{at: 2020 * ms, tick: true, call: opCreate, until: never},
		{at: 2030 * ms, res: is(outExists), call: opGet, until: never},
		{at: 2040 * ms, res: got(5, other), wake: 4040 * ms, until: never},
	}},
	{"standby creates the entry the server removed", "", []mstep{
		{at: 0, tick: true, call: opCreate, until: never},
		{at: 10 * ms, res: is(outExists), call: opGet, until: never},
		{at: 20 * ms, res: is(outNotFound), call: opCreate, until: never}, // expired in between
		{at: 30 * ms, res: ok(8), wake: 2020 * ms, ev: evTaken, until: 5520 * ms},
	}},
	{"take-over race lost", "", []mstep{
		{at: 0, tick: true, call: opCreate, until: never},
		{at: 10 * ms, res: is(outExists), call: opGet, until: never},
		{at: 20 * ms, res: got(3, other), wake: 2020 * ms, until: never},
		{at: 6100 * ms, tick: true, call: opCreate, until: never},
		{at: 6110 * ms, res: is(outExists), call: opGet, until: never},
		{at: 6120 * ms, res: got(3, other), call: opUpdate, rev: 3, until: never},
		{at: 6130 * ms, res: is(outMismatch), call: opGet, until: never},
		{at: 6140 * ms, res: got(4, holderOf("c", "x")), wake: 8140 * ms, until: never},
	}},
	{"a create stored but not answered is recognised", "", []mstep{
		{at: 0, tick: true, call: opCreate, until: never},
		{at: 1 * time.Second, res: failedWith(errTimout), wake: 1500 * ms, until: never},
		{at: 1500 * ms, tick: true, call: opCreate, until: never},
		{at: 1510 * ms, res: is(outExists), call: opGet, until: never},
		{at: 1520 * ms, res: got(2, ours), call: opUpdate, rev: 2, until: never},
		{at: 1530 * ms, res: ok(3), wake: 3520 * ms, ev: evTaken, until: 7020 * ms},
	}},
	{"a restarted shaper takes its own entry back at once", "run-1", []mstep{
		{at: 0, tick: true, call: opCreate, until: never},
		{at: 10 * ms, res: is(outExists), call: opGet, until: never},
		{at: 20 * ms, res: got(5, earlier), call: opUpdate, rev: 5, until: never},
		{at: 30 * ms, res: ok(6), wake: 2020 * ms, ev: evTaken, until: 5520 * ms},
	}},
	{"... also one an earlier version wrote", "", []mstep{
		{at: 0, tick: true, call: opCreate, until: never},
		{at: 10 * ms, res: is(outExists), call: opGet, until: never},
		{at: 20 * ms, res: got(5, bareOld), call: opUpdate, rev: 5, until: never},
		{at: 30 * ms, res: ok(6), wake: 2020 * ms, ev: evTaken, until: 5520 * ms},
	}},
	{"a run that held the lease gives it up to a newer run of its instance", "", holder(
		mstep{at: 9 * time.Second, tick: true, call: opUpdate, rev: 1, until: 5500 * ms},
		mstep{at: 9010 * ms, res: is(outMismatch), call: opGet, until: 5500 * ms},
		mstep{at: 9020 * ms, res: got(4, newerRun), wake: 11020 * ms, ev: evLost, until: never},
		// ... and treats it as another shaper's from then on.
		mstep{at: 11020 * ms, tick: true, call: opCreate, until: never},
		mstep{at: 11030 * ms, res: is(outExists), call: opGet, until: never},
		mstep{at: 11040 * ms, res: got(4, newerRun), wake: 11240 * ms, until: never},
	)},
	{"graceful release", "", holder(
		mstep{at: 1 * time.Second, release: true, call: opDelete, rev: 1, ev: evLost, until: never,
			holds: []check{probe(1*time.Second, false)}},
	)},
}

func TestLeaseMachine(t *testing.T) {
	for _, c := range machineCases {
		t.Run(c.name, func(t *testing.T) {
			run := c.run
			if run == "" {
				run = "run-1"
			}
			m := newLeaseMachine(ttl, "a", run)
			for i, s := range c.steps {
				now := t0.Add(s.at)
				var a leaseAction
				switch {
				case s.release:
					a = m.release(now)
				case s.tick:
					a = m.tick(now)
				default:
					a = m.observe(now, s.res)
				}
				what := fmt.Sprintf("step %d at %v (%s)", i, s.at, stepName(s))
				if a.call.op != s.call || s.call != opNone && a.call.rev != s.rev {
					t.Fatalf("%s: asks for %v of revision %d, want %v of %d", what, a.call.op, a.call.rev, s.call, s.rev)
				}
				if s.call == opNone && !a.wake.Equal(t0.Add(s.wake)) {
					t.Fatalf("%s: wakes at %v, want %v", what, a.wake.Sub(t0), s.wake)
				}
				if a.event != s.ev {
					t.Fatalf("%s: event %v, want %v", what, a.event, s.ev)
				}
				if s.until == never {
					if m.held() || !m.Deadline().IsZero() {
						t.Fatalf("%s: holding until %v, want not holding", what, m.Deadline().Sub(t0))
					}
				} else if !m.held() || !m.Deadline().Equal(t0.Add(s.until)) {
					t.Fatalf("%s: holding %v until %v, want holding until %v", what, m.held(), m.Deadline().Sub(t0), s.until)
				}
				for _, p := range s.holds {
					if got := m.Holding(t0.Add(p.at)); got != p.on {
						t.Fatalf("%s: Holding at %v = %v, want %v", what, p.at, got, p.on)
					}
				}
			}
		})
	}
}

func stepName(s mstep) string {
	switch {
	case s.release:
		return "release"
	case s.tick:
		return "tick"
	}
	return "answer " + s.res.outcome.String()
}

func (e leaseEvent) String() string {
	return [...]string{"none", "taken", "lost", "failing", "recovered"}[e]
}
