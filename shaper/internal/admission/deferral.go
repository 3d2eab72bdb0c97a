package admission

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nuid"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// DeferredSize is how many deferred jobs a key of p may hold: ten queues'
// worth, at least 1,000. Past it a defer policy answers Full without
// keeping the job.
func DeferredSize(p policies.Policy) int {
	return min(max(10*p.Queue, 1000), 1_000_000)
}

// deferrals remembers, per key token, the deferrals this Gate is making or
// made that the deferred drainer has not reported yet: in between, a fresh
// submission must still queue behind them.
type deferrals struct {
	mu   sync.Mutex
	keys map[string]*deferralState
}

type deferralState struct {
	making int       // deferrals started and not yet stored (or failed)
	seq    uint64    // the highest sequence stored
	at     time.Time // when it was stored
}

// ahead reports whether d still holds fresh submissions back, given the
// highest sequence of the key the deferred drainer has seen.
func (d *deferralState) ahead(seen uint64) bool { return d.making > 0 || d.seq > seen }

// deferredAhead reports whether key token has deferred jobs that a fresh
// submission must queue behind: jobs the deferred drainer holds, or ones
// this Gate is deferring or deferred that the drainer has not seen.
func (g *Gate) deferredAhead(token string, now time.Time) bool {
	st := g.deferDrained.Key(token, now)
	if st.Queued > 0 {
		return true
	}
	ds := &g.deferrals
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.keys[token]
	if d == nil {
		return false
	}
	if d.ahead(st.Seen) {
		return true
	}
	delete(ds.keys, token)
	return false
}

// deferring records that a job of key token is being deferred; done
// records where it was stored (0: nowhere).
func (ds *deferrals) deferring(token string, now func() time.Time) (done func(seq uint64)) {
	ds.mu.Lock()
	if ds.keys == nil {
		ds.keys = make(map[string]*deferralState)
	}
	d := ds.keys[token]
	if d == nil {
		d = &deferralState{}
		ds.keys[token] = d
	}
	d.making++
	ds.mu.Unlock()
	return func(seq uint64) {
		ds.mu.Lock()
		defer ds.mu.Unlock()
		d.making--
		if seq > d.seq {
			d.seq, d.at = seq, now()
		}
	}
}

// sweep forgets the deferrals the deferred drainer has seen (or that are so
// old that its watch must have restarted past them: it reports every job).
func (ds *deferrals) sweep(seen View, now time.Time) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for token, d := range ds.keys {
		if !d.ahead(seen.Key(token, now).Seen) || d.making == 0 && now.Sub(d.at) > time.Minute {
			delete(ds.keys, token)
		}
	}
}

// deferJob keeps a job its key's full queue refused, and decides Deferred
// with the job id and when it is expected to run.
func (g *Gate) deferJob(ctx context.Context, p *policies.Policy, token string, job queue.Job, now time.Time) Decision {
	// A deferred job keeps its id through re-admission: it is made here, the
	// Idempotency-Key's (so a retry is stored once) or a new one.
	job.ID = cmp.Or(job.Dedupe, nuid.Next())
	done := g.deferrals.deferring(token, g.now)
	rec, err := store(ctx, g.deferred, job, deferSpan)
	done(rec.Seq) // 0 when nothing was stored; a duplicate's is the first job's
	g.cfg.Storage.observe(err, now)
	switch {
	case err == nil:
	case errors.Is(err, queue.ErrFull):
		g.counts.rejected.Add(1)
		d := g.fullDecision(p, job.Key, token, now)
		d.Reason += "; its deferred jobs are at their limit too (" + strconv.Itoa(DeferredSize(*p)) + "), so this one is not kept"
		return d
	case errors.Is(err, queue.ErrStorageFull):
		g.counts.unavailable.Add(1)
		g.failed.logAs(g.log, "deferral failed: jetstream storage full", err, now) // once a second, as admissions'
		return storageFull(err)
	default:
		g.counts.unavailable.Add(1)
		g.failed.logAs(g.log, "deferral failed", err, now)
		return unavailable("queue backend", err)
	}
	if rec.Duplicate {
		g.counts.duplicates.Add(1)
	} else {
		g.counts.deferred.Add(1)
	}
	main := g.drained.Key(token, now)
	// The deferred jobs ahead of this one, this one counted: the deferred
	// drainer waits (briefly) to have seen those stored just before it (a
	// burst of deferrals comes faster than its watch reports them).
	def, _ := g.deferDrained.Stored(token, rec.Seq, now, awaitSeen)
	ahead := def.Queued
	// The job goes back into its queue when a slot frees, behind the jobs
	// waiting there and the deferred jobs ahead of it: it starts as the
	// key's fresh job that many places on would.
	eta := max(g.drained.StartIn(token, freshJobs(main)+ahead, now), g.room(p, token, main, now))
	// A resubmission of a job re-admitted since (the deferred store's
	// duplicate window still knows it) leaves its record as it is.
	readmitted := false
	if rec.Duplicate && g.cfg.Deferred != nil {
		was, still, of := g.cfg.Deferred(ctx, job.ID)
		readmitted = was && !still
		if of != "" { // it was found to be a job stored before: answer as that one
			return g.accepted(p, token, queue.Receipt{ID: of, Duplicate: true}, now)
		}
	}
	if g.cfg.OnDefer != nil && !readmitted {
		g.cfg.OnDefer(job.ID, job.Key, now.Add(eta))
	}
	d := g.fullDecision(p, job.Key, token, now)
	d.Outcome, d.ID, d.Duplicate = Deferred, job.ID, rec.Duplicate
	d.RetryAfter = max(eta, time.Millisecond)
	d.ETA = d.RetryAfter
	d.Limits.RetryAfter = eta
	d.Reason += "; the job is deferred and will be re-admitted when there is room; do not resubmit"
	return d
}

// Readmitter returns the sink of the deferred drainer: it "delivers" each
// deferred job back into its key's queue, paced at the policy's outflow
// rate, only when the key has room — so re-admission can never push a key
// past its queue size or rate.
func (g *Gate) Readmitter() drain.Sink { return readmitter{g} }

type readmitter struct{ g *Gate }

// Deliver implements drain.Sink: it gives up past the deadline, waits
// (without counting an attempt) while the key's queue is known to be full,
// and otherwise admits the job with its original id, so a re-admission
// repeated after a crash is stored once.
func (r readmitter) Deliver(ctx context.Context, d *drain.Delivery) error {
	g := r.g
	p := g.policy.Load()
	m := d.Msg
	now := g.now()
	if dl := p.Retry.Deadline; dl > 0 && now.After(m.EnqueuedAt.Add(dl)) {
		return &drain.GiveUpError{Reason: drain.ReasonDeadline, Cause: fmt.Sprintf("deferred since %s, deadline %s", m.EnqueuedAt.UTC().Format(time.RFC3339), dl)}
	}
	if g.decide(p, m.Token, now, readmission) == full {
		return &drain.RetryAfterError{After: g.roomIn(p, m.Token, now), Cause: "key's queue is full", NotAttempted: true}
	}
	h := queue.JobHeader(m.Header)
	h.Set(queue.HeaderDeferrals, strconv.Itoa(m.Attempt-1))
	asked := now
	rec, err := g.queue.Admit(ctx, queue.Job{ID: m.ID, Key: m.Key, Payload: m.Payload, EnqueuedAt: m.EnqueuedAt, Header: h})
	switch {
	case err == nil:
		if of := g.storedAs(ctx, m.ID, rec); of != "" {
			// Nothing went back into the queue: the job is one stored
			// already, found in the duplicate window.
			g.counts.duplicates.Add(1)
			if g.cfg.OnDuplicate != nil {
				g.cfg.OnDuplicate(m.ID, m.Key, of)
			}
			return nil
		}
		g.counts.readmitted.Add(1)
		if g.cfg.OnReadmit != nil {
			g.cfg.OnReadmit(m.ID, m.Key, m.Attempt-1)
		}
		return nil
	case errors.Is(err, queue.ErrFull):
		// Not an attempt either: the store, not a consumer, said no, when
		// the drainer had not yet seen the jobs that fill the key (just
		// stored, or at start). Counted as a failed attempt, it waited the
		// retry backoff (1 s) instead of the room's time, and came a slot
		// or more after the time the producer was promised.
		g.refused(p, m.Token, asked)
		now = g.now()
		wait, known := g.freeIn(p, m.Token, g.drained.Key(m.Token, now), asked)
		wait = max(wait, time.Millisecond)
		if !known {
			// The drainer sees room but never freed a slot of the key: it
			// has not seen the jobs that fill it, or is not the key's, and
			// cannot tell when room comes. Asked again after a slot or
			// refusalPause, not every millisecond. (A slot it freed since
			// the store was asked is room now: 1 ms.)
			wait = min(p.Outflow.Interval(), refusalPause)
		}
		return &drain.RetryAfterError{After: wait, Cause: "key's queue is full", NotAttempted: true}
	default:
		return err
	}
}

// lookup is a Store that reads a stored job by its sequence, and names a
// place by its sequence (*queue.Queue).
type lookup interface {
	Lookup(ctx context.Context, seq uint64) (*queue.Msg, error)
	JobID(seq uint64) string
}

// storedAs returns, of a deferred job id whose re-admission the store
// answered with rec, the id of the other job it was found to be: none when
// it was stored now, or found as itself (a re-admission repeated after a
// crash). A job found in the duplicate window under another id is the
// first submission of its Idempotency-Key, stored, not deferred, and named
// by its place; read to tell, or, when it is gone (delivered), told by the
// deferred job's record, which a re-admission of it marked re-admitted.
func (g *Gate) storedAs(ctx context.Context, id string, rec queue.Receipt) string {
	q, ok := g.queue.(lookup)
	if !rec.Duplicate || !ok {
		return ""
	}
	var first string
	switch m, err := q.Lookup(ctx, rec.Seq); {
	case err == nil:
		first = m.ID
	case g.cfg.Deferred == nil:
		return "" // gone, and nothing tells which it was
	default:
		if _, still, _ := g.cfg.Deferred(ctx, id); !still {
			return "" // gone, and re-admitted as itself before
		}
		first = q.JobID(rec.Seq)
	}
	if first == id {
		return ""
	}
	return first
}

// refusalPause is the longest a re-admission the store refused waits when
// the drainer cannot say when the key has room.
const refusalPause = 100 * time.Millisecond

// roomIn is how long until a slot of key token frees, at least 1 ms.
func (g *Gate) roomIn(p *policies.Policy, token string, now time.Time) time.Duration {
	return max(g.room(p, token, g.drained.Key(token, now), now), time.Millisecond)
}
