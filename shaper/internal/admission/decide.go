package admission

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

// verdict is what a Gate knows of a key before asking its store.
type verdict uint8

const (
	// enter: try the store, which has the final word.
	enter verdict = iota
	// full: the key is known to be full; refused without asking the store.
	full
	// behind: the key has deferred jobs, and a fresh job of a defer policy
	// queues behind them.
	behind
)

// arrival says where a job comes from.
type arrival uint8

const (
	fresh       arrival = iota // a submission
	readmission                // a deferred job put back into its queue
)

// decide is the one answer to "may a job enter key token now?" before the
// store is asked. Three things can say no:
//
//   - the store refused a job of the key before, and the drainer says no
//     slot frees before now (the full-key cache, kept by refused);
//   - for a fresh job of a defer policy, the key has deferred jobs: a slot
//     that frees is theirs, so submission order holds (deferredAhead);
//   - the drainer counts the key full where the store cannot enforce the
//     size: a queue size lowered over live jobs (the store keeps the old,
//     larger limit, since lowering it would purge jobs; enforced per shaper,
//     not atomically), and a re-admission, which the draining shaper makes
//     from its exact count.
//
// Otherwise the store decides, atomically: a refusal there is final.
func (g *Gate) decide(p *policies.Policy, token string, now time.Time, from arrival) verdict {
	if until, ok := g.full.Load(token); ok {
		if now.Before(until.(time.Time)) {
			return full
		}
		g.full.CompareAndDelete(token, until)
	}
	if from == fresh && p.Overflow == policies.OverflowDefer && g.deferredAhead(token, now) {
		return behind
	}
	if (from == readmission || p.Queue < g.queue.Limit()) && g.drained.Key(token, now).Queued >= int64(p.Queue) {
		return full
	}
	return enter
}

// refused records that the store, asked at asked, refused a job of key
// token as full. The draining shaper knows exactly when a slot frees:
// until then the answer cannot change, and decide says full without asking
// again.
func (g *Gate) refused(p *policies.Policy, token string, asked time.Time) {
	if !g.drained.Active() {
		return
	}
	if room, _ := g.freeIn(p, token, g.drained.Key(token, asked), asked); room > 0 {
		g.full.Store(token, asked.Add(room))
	}
}

// Step says what a Reservation needs next.
type Step uint8

const (
	// Decided: the decision is final (Reservation.Decision).
	Decided Step = iota
	// StoreJob: store Reservation.Job, then pass the store's answer to Settle.
	StoreJob
	// Block: deciding needs a call that may wait on the network (the
	// admission limiter, a deferral): call Admit, from a goroutine that may
	// block. Nothing has happened yet.
	Block
)

// Reservation is a request that went through a Gate's checks: either
// decided, or a job to store (Step says which).
type Reservation struct {
	Step     Step
	Decision Decision  // when Decided
	Job      queue.Job // when Store

	p     *policies.Policy
	token string
	now   time.Time
}

// Reserve runs the checks of Admit that need no network at now: the
// request's key and size, the admission limit (Block when there is one),
// and the key's verdict. A StoreJob reservation's Job may be stored
// asynchronously (queue.Queue.AdmitAsync); Settle turns the answer into the
// Decision.
func (g *Gate) Reserve(r Request, now time.Time) Reservation {
	res := g.reserve(context.Background(), r, now, false)
	if res.Step == Decided {
		g.observe(r.Key, len(r.Payload), now, res.Decision.Outcome)
	}
	return res
}

// Admit decides about r at now, storing the job when it may enter: the
// whole admission of one job. It may block on the admission limiter, the
// store and a deferral, each bounded by its own timeout.
func (g *Gate) Admit(ctx context.Context, r Request, now time.Time) Decision {
	res := g.reserve(ctx, r, now, true)
	if res.Step != StoreJob {
		g.observe(r.Key, len(r.Payload), now, res.Decision.Outcome)
		return res.Decision
	}
	rec, err := store(ctx, g.queue, res.Job, storeSpan)
	return g.Settle(ctx, &res, rec, err)
}

// reserve is Reserve, or with block the part of Admit before the store.
// Without block it returns Block before any side effect where it would wait.
func (g *Gate) reserve(ctx context.Context, r Request, now time.Time, block bool) Reservation {
	p := g.policy.Load()
	decided := func(d Decision) Reservation { return Reservation{Step: Decided, Decision: d} }
	token, err := queue.EncodeKey(r.Key)
	if err != nil {
		return decided(Decision{Outcome: Invalid, Reason: err.Error(), Err: err})
	}
	if limit := g.queue.MaxPayload(); len(r.Payload) > limit {
		err := fmt.Errorf("%w: at most %d bytes", queue.ErrTooLarge, limit)
		return decided(Decision{Outcome: Invalid, Reason: err.Error(), Err: err})
	}
	if l := g.limiter.Load(); l != nil {
		if !block {
			return Reservation{Step: Block}
		}
		if d, ok := g.admitLimit(ctx, l, p, r.Key, now); !ok {
			return decided(d)
		}
	}
	res := Reservation{Step: StoreJob, p: p, token: token, now: now}
	v := g.decide(p, token, now, fresh)
	// A resubmission under an Idempotency-Key asks the store even when its
	// key is full: its duplicate window answers for a job stored before
	// (202, the first one's id), and a full key refuses the others as the
	// drainer would (ErrFull: rejected or deferred in Settle). Only where
	// the store's bound is the policy's: a queue made smaller live is
	// bounded by the drainer alone.
	ask := v == full && r.Idempotency != "" && p.Queue >= g.queue.Limit()
	if v == full && p.Overflow != policies.OverflowDefer && !ask {
		// A flood on a full key: answered without making a job at all.
		g.counts.rejected.Add(1)
		return decided(g.fullDecision(p, r.Key, token, now))
	}
	h := queue.JobHeader(r.Header)
	// No id yet: the queue names the job after where it stores it.
	res.Job = queue.Job{Dedupe: dedupeID(p.Name, r), Key: r.Key, Payload: r.Payload, Header: h}
	if v == enter || ask {
		return res
	}
	// The key is full or has deferred jobs ahead, and the policy defers.
	if !block {
		return Reservation{Step: Block}
	}
	return decided(g.deferJob(ctx, p, token, res.Job, now))
}

// SettleBlocks reports whether Settle may block with the store's answer
// err: a refusal of a defer policy's job defers it.
func (r *Reservation) SettleBlocks(err error) bool {
	return errors.Is(err, queue.ErrFull) && r.p.Overflow == policies.OverflowDefer
}

// Settle turns the store's answer to a StoreJob reservation (rec, or err) into
// the Decision. For a defer policy whose key is full it defers the job,
// which blocks (SettleBlocks).
func (g *Gate) Settle(ctx context.Context, r *Reservation, rec queue.Receipt, err error) Decision {
	d := g.settle(ctx, r, rec, err)
	g.observe(r.Job.Key, len(r.Job.Payload), r.now, d.Outcome)
	return d
}

func (g *Gate) settle(ctx context.Context, r *Reservation, rec queue.Receipt, err error) Decision {
	p, token, now := r.p, r.token, r.now
	g.cfg.Storage.observe(err, now)
	switch {
	case err == nil:
		// No job record is needed: the id names where the job is stored.
		if rec.Duplicate {
			g.counts.duplicates.Add(1)
			if j := r.Job; j.ID == "" && j.Dedupe != "" && g.cfg.Deferred != nil {
				if was, _, of := g.cfg.Deferred(ctx, j.Dedupe); was {
					rec.ID = cmp.Or(of, j.Dedupe) // the first submission, deferred, re-admitted since
				}
			}
		} else {
			g.counts.admitted.Add(1)
		}
		return g.accepted(p, token, rec, now)
	case errors.Is(err, queue.ErrFull):
		asked := now
		if g.awaitFilling(ctx, p, token, now) {
			now = g.now() // the answer's waits count from when it is given
		}
		g.refused(p, token, asked)
		if p.Overflow == policies.OverflowDefer {
			return g.deferJob(ctx, p, token, r.Job, now)
		}
		g.counts.rejected.Add(1)
		return g.fullDecision(p, r.Job.Key, token, now)
	case errors.Is(err, queue.ErrTooLarge), errors.Is(err, queue.ErrBadKey):
		return Decision{Outcome: Invalid, Reason: err.Error(), Err: err}
	case errors.Is(err, queue.ErrStorageFull):
		g.counts.unavailable.Add(1)
		g.failed.logAs(g.log, "admission failed: jetstream storage full", err, now) // once a second: a tour counted 2,431 lines in 10 s
		return storageFull(err)
	default:
		g.counts.unavailable.Add(1)
		g.failed.log(g.log, err, now)
		d := unavailable("queue backend", err)
		if queue.MaybeStored(err) {
			d.Reason += "; the job may have been stored: submit it again with the same Idempotency-Key to have it stored once"
		}
		return d
	}
}

// The spans of storing a job: in its queue, or kept as deferred.
const (
	storeSpan = "shaper.store"
	deferSpan = "shaper.defer"
)

// store admits job into s, in a span named name of its own when ctx's span
// is recorded.
func store(ctx context.Context, s Store, job queue.Job, name string) (queue.Receipt, error) {
	ctx, span := jobtrace.Child(ctx, name, trace.SpanKindClient)
	rec, err := s.Admit(ctx, job)
	EndStore(span, rec, err)
	return rec, err
}

// StoreSpan starts the span of storing a StoreJob reservation's job
// asynchronously, as a child of ctx's span when that one is recorded (else
// it returns that span, at no cost); EndStore ends it with the answer.
func StoreSpan(ctx context.Context) trace.Span {
	_, span := jobtrace.Child(ctx, storeSpan, trace.SpanKindClient)
	return span
}

// EndStore ends span, the storing of a job the store answered with rec or
// err: a full queue is an answer there, not a failure.
func EndStore(span trace.Span, rec queue.Receipt, err error) {
	if !span.IsRecording() {
		return
	}
	full := errors.Is(err, queue.ErrFull)
	span.SetAttributes(attribute.Bool("shaper.full", full), attribute.String("shaper.job.id", rec.ID))
	if full {
		err = nil
	}
	jobtrace.End(span, err)
}

// storageFull is the decision when the store refused the job for want of
// storage (queue.ErrStorageFull): no job of any key can be stored until
// removals free room, which the drain's deliveries do.
func storageFull(err error) Decision {
	return Decision{Outcome: Unavailable, RetryAfter: DefaultUnavailableWait, Err: err,
		Reason: "queue backend out of storage: JetStream has no room left to store the job; jobs are refused until delivered jobs free room or JetStream is given more storage (" + err.Error() + ")"}
}

// unavailable is the decision when what (a part of the shaper behind
// admission) failed with err.
func unavailable(what string, err error) Decision {
	return Decision{Outcome: Unavailable, RetryAfter: DefaultUnavailableWait, Reason: what + " unavailable: " + err.Error(), Err: err}
}

// accepted is the decision for a job stored at rec, with the key's depth
// and the job's expected start from the drainer's schedule.
func (g *Gate) accepted(p *policies.Policy, token string, rec queue.Receipt, now time.Time) Decision {
	// The job's start depends on its key's jobs stored before it (a burst
	// of the key's producers at once stores several before the watch
	// reports the first), and under a total cap (of the rate, or of the
	// deliveries awaiting their receipt) on every key's: the drainer waits
	// (briefly) to have seen them all, and counts the job at its place.
	st, eta, waiting := g.storedConsumer(token, rec.Seq, now, awaitSeen)
	queued := st.Queued
	if !rec.Duplicate {
		// The job itself, which a drainer may have started already.
		queued = max(queued, 1)
	}
	interval := p.Outflow.Interval()
	return Decision{
		Outcome:   Accepted,
		ID:        rec.ID,
		Duplicate: rec.Duplicate,
		Queued:    queued,
		ETA:       eta,
		Limits: limiter.Result{
			Allowed:   true,
			Limit:     int64(p.Queue),
			Remaining: max(int64(p.Queue)-queued, 0),
			Reset:     eta + interval,
		},
		Window:             time.Duration(p.Queue) * interval,
		WaitingForConsumer: waiting,
	}
}

// awaitSeen bounds how long an accepted job's answer waits for the drainer
// to see the jobs stored before it.
const awaitSeen = 20 * time.Millisecond

// freshJobs is how many of a key's jobs wait for their first attempt (the
// n of drain.Drainer.StartIn for the last of them).
func freshJobs(st drain.KeyStatus) int64 { return max(st.Waiting-int64(st.Retrying), 0) }

// fullDecision is the decision for a job refused because its key's queue
// is full (by the store, or decide, at now): come back when the key's next
// slot frees.
func (g *Gate) fullDecision(p *policies.Policy, key, token string, now time.Time) Decision {
	st, noConsumer := g.keyConsumer(token, now)
	interval := p.Outflow.Interval()
	queued := max(st.Queued, int64(p.Queue))
	room, _ := g.freeIn(p, token, st, now)
	return Decision{
		Outcome:    Full,
		Queued:     queued,
		RetryAfter: max(room, time.Millisecond),
		Limits: limiter.Result{
			Limit:      int64(p.Queue),
			RetryAfter: room,
			Reset:      g.drained.StartIn(token, max(freshJobs(st), 1), now) + interval,
		},
		Window: time.Duration(p.Queue) * interval,
		Reason: "queue of key " + httpapi.Quote(key) + " is full" + waitingFor(noConsumer),
	}
}

// keyConsumer returns the key's status, and since when the deliveries of
// its drainer have found no consumer (ConsumerView; zero when they do, or
// when the View cannot tell): both in one answer of the drainer.
func (g *Gate) keyConsumer(token string, now time.Time) (drain.KeyStatus, time.Time) {
	if cv, ok := g.drained.(ConsumerView); ok {
		return cv.KeyConsumer(token, now)
	}
	return g.drained.Key(token, now), time.Time{}
}

// storedConsumer is Stored's answer for the job stored at seq, and since
// when the deliveries of the key's drainer have found no consumer, both in
// one answer (ConsumerView; zero when they do, or when the View cannot
// tell), as keyConsumer is Key's.
func (g *Gate) storedConsumer(token string, seq uint64, now time.Time, wait time.Duration) (drain.KeyStatus, time.Duration, time.Time) {
	if cv, ok := g.drained.(ConsumerView); ok {
		return cv.StoredConsumer(token, seq, now, wait)
	}
	st, eta := g.drained.Stored(token, seq, now, wait)
	return st, eta, time.Time{}
}

// waitingFor is what a full key's answer adds when the deliveries of its
// drainer have found no consumer since since (the key's Retry-After is
// then the drain's probe of the subject, not its outflow): nothing when
// since is zero.
func waitingFor(since time.Time) string {
	if since.IsZero() {
		return ""
	}
	if w := lastWaiting.Load(); w != nil && w.since.Equal(since) {
		return w.text
	}
	text := ": " + drain.WaitingForConsumer + " since " + since.UTC().Format(time.RFC3339) + " (no consumer answered the policy's last delivery)"
	lastWaiting.Store(&waitingText{since, text})
	return text
}

// lastWaiting is the last text waitingFor made: every refusal of a policy
// without a consumer says the same since, formatted once.
var lastWaiting atomic.Pointer[waitingText]

type waitingText struct {
	since time.Time
	text  string
}
