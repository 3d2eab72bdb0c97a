package cluster

import (
	"encoding/json"
	"time"
)

// A drain lease is an entry, named after its policy, in the leases bucket,
// whose value names its holder (instance id and run) and which the server
// removes LeaseTTL after it was last written (the bucket's TTL). The
// protocol is a pure state machine, leaseMachine: given the time and the
// answer to the key-value call it asked for, it says which call to make
// next or when to wake up. It reads no clock and does no I/O; HoldLease
// drives it with the bucket and a timer, the tests with a virtual clock
// and a simulated bucket.
//
// The holder rewrites the entry every LeaseTTL/3 with a compare-and-set on
// its revision, and retries every LeaseTTL/12 when a renewal fails. A
// standby looks at the entry every LeaseTTL/3 and, once its revision stops
// changing, every LeaseTTL/30. It creates the entry the moment the server
// has removed it, and takes it over, with a compare-and-set on its
// revision, once it has seen that revision unchanged for a whole LeaseTTL
// on its own clock. So the drain changes hands LeaseTTL after the holder's
// last renewal, whatever it died of; a graceful stop deletes the entry
// (compare-and-set) and hands it over at the next look.
//
// Fencing. The holder may deliver only until its deadline: the time it
// SENT its last successful write, plus LeaseTTL, minus a safety margin of
// LeaseTTL/12 (leaseTimings.margin) — never the time the answer came
// back, which can be any time later. Each shaper measures on its own
// monotonic clock, and the deadline is checked before every delivery
// (drain.Drainer.HoldUntil), so a holder frozen past its deadline (a
// stopped process, a long GC pause, a stalled VM) wakes up delivering
// nothing until a renewal succeeds. No two shapers hold a lease at one
// instant, because every holding starts with a successful write, and a
// write succeeds only in one of three ways:
//
//   - A compare-and-set on the revision r the holder's last successful
//     write stored. The holder's own renewals are compare-and-sets on r
//     too, so once a standby's take-over succeeds no renewal of the old
//     holder ever will, and its last successful write is r (or an
//     earlier one). The standby takes over only after seeing r unchanged
//     for LeaseTTL on its own clock, counted from when it first received
//     r in an answer — after r was stored, so after the holder sent it.
//     The old holder's deadline, LeaseTTL − margin after that send on its
//     clock, comes first.
//   - A create, once the server has removed the entry: at least LeaseTTL
//     after it stored the holder's last write, by the server's clock. The
//     holder's deadline again comes first.
//   - A create after a graceful stop's delete: the stopping holder stopped
//     holding before it sent the delete.
//
// The margin absorbs what separates "LeaseTTL on one clock" from "LeaseTTL
// on another": the rates of the shapers' monotonic clocks, assumed within
// ±0.1 % of real time, which costs 2 × 0.1 % × LeaseTTL = LeaseTTL/500 (a
// crystal is within 0.01 %; ntpd slews a clock by at most 0.05 %, while
// chrony may slew faster to correct a large offset unless its maxslewrate
// is bounded), and the servers' wall clocks, which time the bucket's TTL:
// after a leader change, an entry stored by one server may be removed by
// another whose clock is ahead. The rest of the margin, just under 0.49 s
// at the default LeaseTTL of 6 s, is what the servers' clocks may differ
// by; the property test runs 0.4 s, and its closest hand-over is the 89 ms
// that leaves.
//
// A holder's request that is delayed, or answered after it gave up on it,
// changes nothing: its deadline only ever comes from the send time of a
// write it saw succeed. The property test (lease_property_test.go) runs
// these assumptions at their bounds.
//
// A holder whose renewals fail (a JetStream election, a reconnection)
// keeps its holding state: it delivers nothing past its deadline, but
// resumes the moment a renewal gets through, without reading every key
// again. One that finds its entry gone (expired during a long election)
// creates it again and goes on holding, as a lone shaper must. It gives
// the lease up only when a look finds another shaper's entry, or a
// compare-and-set shows the lease taken. Had another shaper taken the
// lease and lost it again while this one could not reach the bucket, this
// one's first deliveries afterwards may repeat some of the other's, which
// at-least-once delivery allows; the fence is not affected.
//
// A restarted shaper takes its own entry (its instance id, another run) back
// at once, if it has not held the lease in this run yet: that is safe only
// because Claim makes sure no other live shaper has its instance id, which
// it cannot do for one frozen longer than its membership's lifetime. The
// frozen run, woken, finds a newer run's entry and gives the lease up.

// leaseTimings are the lease's periods for a lease lifetime.
type leaseTimings struct {
	ttl     time.Duration // the bucket's TTL
	unmoved time.Duration // how long a standby sees a revision unchanged before taking it over: ttl
	renew   time.Duration // the holder's renewals; a standby's looks
	retry   time.Duration // after a failure
	watch   time.Duration // a standby's looks at an entry that stopped changing
	request time.Duration // bound of one request
	margin  time.Duration // taken off a holding's end (see above)
}

func timingsFor(ttl time.Duration) leaseTimings {
	return leaseTimings{ttl: ttl, unmoved: ttl, renew: ttl / 3, retry: ttl / 12, watch: ttl / 30, request: ttl / 6, margin: ttl / 12}
}

// kvOp is a key-value call on the lease's entry.
type kvOp int

const (
	opNone   kvOp = iota
	opCreate      // create the entry with our value
	opGet         // read the entry
	opUpdate      // write our value if the entry's revision is rev
	opDelete      // delete the entry if its revision is rev
)

func (o kvOp) String() string {
	return [...]string{"none", "create", "get", "update", "delete"}[o]
}

// kvCall is a call the machine asks for.
type kvCall struct {
	op    kvOp
	rev   uint64 // the revision an update or delete expects
	value []byte // what a create or update writes
}

// outcome is how a key-value call ended.
type outcome int

const (
	outOK       outcome = iota // done: rev (and value, for a get) is the entry's
	outExists                  // a create found the entry
	outNotFound                // a get found no entry
	outMismatch                // an update or delete found another revision, or no entry
	outFailed                  // anything else: a timeout, a lost connection, an election; a write may have been stored
)

func (o outcome) String() string {
	return [...]string{"ok", "exists", "not found", "mismatch", "failed"}[o]
}

// kvResult is the answer to a kvCall.
type kvResult struct {
	outcome outcome
	rev     uint64
	value   []byte
	err     error // what failed, for the log
}

// leaseEvent is what a step changed that deserves a log line.
type leaseEvent int

const (
	evNone      leaseEvent = iota
	evTaken                // this shaper holds the lease now
	evLost                 // it no longer does (why says why)
	evFailing              // the holder's renewals started failing
	evRecovered            // a renewal got through after failures
)

// leaseAction is what the driver does next: make call, or, when there is
// none, call tick at wake.
type leaseAction struct {
	call  kvCall
	wake  time.Time
	event leaseEvent
	why   string    // of evLost
	since time.Time // of evRecovered: when the renewals started failing
	err   error     // of evFailing
}

// holderValue is what an entry says about its holder.
type holderValue struct {
	Instance string `json:"instance"`
	Run      string `json:"run"` // tells this run of the instance from an earlier one
}

// parseHolder reads an entry's value; one that is not ours to parse (an
// earlier version wrote the bare instance id) names an instance and no run.
func parseHolder(v []byte) holderValue {
	var h holderValue
	if json.Unmarshal(v, &h) != nil || h.Instance == "" {
		return holderValue{Instance: string(v)}
	}
	return h
}

// phase is the call in flight.
type phase int

const (
	idle      phase = iota
	renewing        // update of our entry, holding
	creating        // create
	looking         // get
	taking          // update of an entry we may take: ours, our restart's, or unchanged for a TTL
	releasing       // delete of our entry
)

// leaseMachine is one shaper's side of one drain lease. It is not safe for
// concurrent use.
type leaseMachine struct {
	t     leaseTimings
	me    holderValue
	value []byte // me, encoded

	holding  bool
	fresh    bool      // has not held the lease in this run
	rev      uint64    // our entry's revision, while holding
	deadline time.Time // end of the holding: last successful write's send time + ttl − margin
	failing  bool      // renewals fail
	failedAt time.Time // when the first of the failing renewals was sent

	// another shaper's entry, while not holding: its revision, when an
	// answer first showed it, and whether it changed at the last look
	otherRev   uint64
	otherSince time.Time
	otherMoved bool

	pending phase     // the call in flight
	sent    time.Time // when it was sent

	// eager makes a standby look every watch period even at an entry
	// whose holder renews it: a shaper the partition is handed over to
	// (see Cluster.HoldPartitions) takes it the moment the holder's
	// graceful release deleted it.
	eager bool
}

// newLeaseMachine returns the machine of a shaper named instance, in its
// run run (unique to this process and lease), for a bucket TTL of ttl.
func newLeaseMachine(ttl time.Duration, instance, run string) *leaseMachine {
	me := holderValue{Instance: instance, Run: run}
	v, _ := json.Marshal(me)
	return &leaseMachine{t: timingsFor(ttl), me: me, value: v, fresh: true}
}

// held reports whether this shaper is the lease's holder: it took the
// lease and has not seen it lost, though its deadline may have passed.
func (m *leaseMachine) held() bool { return m.holding }

// Holding reports whether this shaper may deliver at now, on the clock the
// machine is driven with: it holds the lease and its deadline has not
// passed.
func (m *leaseMachine) Holding(now time.Time) bool {
	return m.holding && now.Before(m.deadline)
}

// Deadline returns the end of the holding (the zero time while not
// holding): deliveries may start only before it.
func (m *leaseMachine) Deadline() time.Time {
	if !m.holding {
		return time.Time{}
	}
	return m.deadline
}

// tick is called at the wake time of the last action, or at any time no
// call is in flight: it renews the lease or looks at it.
func (m *leaseMachine) tick(now time.Time) leaseAction {
	if m.pending != idle {
		panic("cluster: lease tick with a call in flight")
	}
	if m.holding {
		return m.send(now, renewing, kvCall{op: opUpdate, rev: m.rev, value: m.value})
	}
	return m.send(now, creating, kvCall{op: opCreate, value: m.value})
}

// release ends the holding at once, before the entry is deleted: the call
// returned, if any, is the delete, whose answer needs no observe.
func (m *leaseMachine) release(now time.Time) leaseAction {
	m.pending = idle
	if !m.holding {
		return leaseAction{wake: now}
	}
	m.holding, m.failing = false, false
	return leaseAction{call: kvCall{op: opDelete, rev: m.rev}, event: evLost, why: "released"}
}

// observe takes the answer to the call in flight, received by now.
func (m *leaseMachine) observe(now time.Time, r kvResult) leaseAction {
	p := m.pending
	m.pending = idle
	switch p {
	case renewing, creating:
		switch r.outcome {
		case outOK:
			return m.wrote(now, r.rev)
		case outFailed:
			return m.failed(now, r.err)
		}
		// Our entry changed, is gone or exists already: look at it (it
		// may still be ours, a renewal stored but not answered).
		return m.send(now, looking, kvCall{op: opGet})
	case looking:
		switch r.outcome {
		case outOK:
			return m.look(now, r.rev, r.value)
		case outNotFound:
			// Gone: expired, or deleted by a graceful stop. A holder
			// creates it again and goes on holding.
			return m.send(now, creating, kvCall{op: opCreate, value: m.value})
		}
		return m.failed(now, r.err)
	case taking:
		switch r.outcome {
		case outOK:
			return m.wrote(now, r.rev)
		case outFailed:
			return m.failed(now, r.err)
		}
		// Written in between: look again.
		return m.send(now, looking, kvCall{op: opGet})
	}
	return leaseAction{wake: now} // releasing, or nothing in flight
}

// look acts on the entry a get found at rev.
func (m *leaseMachine) look(now time.Time, rev uint64, value []byte) leaseAction {
	h := parseHolder(value)
	if h == m.me || h.Instance == m.me.Instance && m.fresh {
		// Ours: a write of ours stored but not answered, or, in a run
		// that has not held the lease yet, a previous run's entry.
		return m.send(now, taking, kvCall{op: opUpdate, rev: rev, value: m.value})
	}
	var a leaseAction
	if m.holding {
		why := "lease taken over by another shaper"
		if h.Instance == m.me.Instance {
			why = "lease taken over by a newer run of this instance"
		}
		a = m.lose(why)
	}
	if rev != m.otherRev {
		m.otherRev, m.otherSince, m.otherMoved = rev, now, true
		if m.eager {
			return leaseAction{wake: now.Add(m.t.watch)}.with(a) // handed over soon
		}
		return leaseAction{wake: now.Add(m.t.renew)}.with(a) // its holder renews it
	}
	m.otherMoved = false
	if now.Sub(m.otherSince) >= m.t.unmoved {
		// Unchanged for a whole lifetime: its holder's deadline has passed.
		return m.send(now, taking, kvCall{op: opUpdate, rev: rev, value: m.value}).with(a)
	}
	return leaseAction{wake: now.Add(m.t.watch)}.with(a) // take it once it expires
}

// wrote records that the call in flight, sent at m.sent, stored our entry
// at rev.
func (m *leaseMachine) wrote(now time.Time, rev uint64) leaseAction {
	var a leaseAction
	switch {
	case !m.holding:
		m.holding, m.fresh, m.otherRev = true, false, 0
		a.event = evTaken
	case m.failing:
		a.event, a.since = evRecovered, m.failedAt
	}
	m.failing = false
	m.rev, m.deadline = rev, m.sent.Add(m.t.ttl-m.t.margin)
	a.wake = m.sent.Add(m.t.renew)
	if a.wake.Before(now) {
		a.wake = now
	}
	return a
}

// failed records that the call in flight failed; a holder keeps holding.
func (m *leaseMachine) failed(now time.Time, err error) leaseAction {
	a := leaseAction{wake: now.Add(m.t.retry)}
	if m.holding && !m.failing {
		m.failing, m.failedAt = true, m.sent
		a.event, a.err = evFailing, err
	}
	return a
}

// lose ends the holding, if any.
func (m *leaseMachine) lose(why string) leaseAction {
	if !m.holding {
		return leaseAction{}
	}
	m.holding, m.failing, m.otherRev = false, false, 0
	return leaseAction{event: evLost, why: why}
}

// send makes c the call in flight, sent at now.
func (m *leaseMachine) send(now time.Time, p phase, c kvCall) leaseAction {
	m.pending, m.sent = p, now
	return leaseAction{call: c}
}

// with returns a carrying the event of b, if a has none.
func (a leaseAction) with(b leaseAction) leaseAction {
	if a.event == evNone {
		a.event, a.why, a.since, a.err = b.event, b.why, b.since, b.err
	}
	return a
}
