package admission

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// Store is where a Gate puts jobs: a policy's queue, or its deferred jobs.
// *queue.Queue (JetStream) and *drain.MemQueue (a replay) implement it.
// Admit must refuse a job for a full key atomically, with an error wrapping
// queue.ErrFull: that refusal is the final word on "full".
type Store interface {
	Admit(ctx context.Context, job queue.Job) (queue.Receipt, error)
	// Limit is the per-key limit Admit enforces atomically.
	Limit() int
	// MaxPayload is the largest payload Admit accepts, in bytes.
	MaxPayload() int
}

// View is what the drainer of a Store knows about each key: how many jobs
// it holds, when a slot frees, and when its n-th fresh job would start, by
// the schedule the drainer acts on. *drain.Drainer implements it.
type View interface {
	Key(token string, now time.Time) drain.KeyStatus
	StartIn(token string, n int64, now time.Time) time.Duration
	Stored(token string, seq uint64, now time.Time, wait time.Duration) (drain.KeyStatus, time.Duration)
	Active() bool
}

// ConsumerView is a View that also knows whether the deliveries of a
// key's drainer find a consumer to take them (answers.View, from the sink
// of the shaper that delivers the key): a full key's answer then says
// when it does not move for want of one. A View without it never says.
type ConsumerView interface {
	View
	// KeyConsumer returns Key's status, and since when the deliveries of
	// the key's drainer have found no consumer: the zero time when the
	// last was taken, or when it is not known.
	KeyConsumer(token string, now time.Time) (drain.KeyStatus, time.Time)
	// StoredConsumer is Stored with, in the same answer, since when the
	// key's drainer's deliveries have found no consumer.
	StoredConsumer(token string, seq uint64, now time.Time, wait time.Duration) (drain.KeyStatus, time.Duration, time.Time)
}

// Config holds a Gate's optional settings; the zero value means an
// in-memory admission limiter, no job records and no logs.
type Config struct {
	// Redis, when set, keeps admission limiter state in Redis, shared by
	// every shaper.
	Redis redis.UniversalClient
	// Shapers counts the live shapers, for the local share of a fail-open
	// admission limit while Redis is lost. Default: 1.
	Shapers func() int64
	// Logger receives failures of the limiter and the store. Default: discard.
	Logger *slog.Logger
	// OnDefer, when set, is told of every job kept in the deferred store,
	// with when it is expected to run; OnReadmit of every deferred job put
	// back into its key's queue, with the re-admissions it waited for. They
	// are called from the admitting goroutine, without locks held.
	OnDefer   func(id, key string, next time.Time)
	OnReadmit func(id, key string, deferrals int)
	// OnDuplicate, when set, is told of a deferred job that re-admission
	// found in the queue's duplicate window under another id, of: a retry
	// of a submission stored, not deferred (its Idempotency-Key's), kept
	// while other deferred jobs of its key waited. It is that job; it is
	// not stored again.
	OnDuplicate func(id, key, of string)
	// Deferred, when set, reports whether a job of this id was deferred
	// (OnDefer was told of it, by any shaper), and whether it still is
	// (OnReadmit was not told of it since). A deferred job keeps its own
	// id through re-admission, its Idempotency-Key's hash
	// (queue.DedupeID), which is also what a retry of its submission is
	// stored as: a retry found in the queue's duplicate window after the
	// re-admission is answered with that id, not the one its sequence
	// would make; and a retry found in the deferred store's window after
	// it does not mark it deferred again. Without it such a retry is
	// answered with the latter, and OnDefer is told of every deferral. of
	// is, of a deferred job found to be another (OnDuplicate), that job's
	// id, which a retry is then answered with.
	Deferred func(ctx context.Context, id string) (was, still bool, of string)
	// Now is the clock of re-admissions and deferrals. Default time.Now;
	// a replay passes its virtual clock.
	Now func() time.Time
	// Storage, when set, is told of the store's answers to the jobs
	// admitted, so that it says when JetStream is out of storage (the
	// Gates of a shaper share one). Default: none.
	Storage *Storage
	// Observe, when set, is told of every decision about a submission (not
	// of re-admissions): the job's key, its payload's size, when it came
	// (the now given to Reserve or Admit) and the outcome. It is called
	// from the deciding goroutine, without locks held, so it must be cheap.
	Observe func(key string, size int, at time.Time, o Outcome)
}

// Gate is the admission of one policy: the one place that answers "may
// this job enter this key now, and if not, when". A Gate is safe for
// concurrent use; Attach it to the drainers of its stores before use.
type Gate struct {
	cfg      Config
	log      *slog.Logger
	queue    Store
	deferred Store
	// drained and deferDrained are the drainers of queue and deferred.
	drained, deferDrained View

	policy  atomic.Pointer[policies.Policy]
	limiter atomic.Pointer[admitLimiter] // nil without an admit block

	// full remembers, per key token, until when the key's queue is known to
	// be full (a time.Time): a flood on a full key is answered without a
	// round trip to the store each.
	full      sync.Map
	deferrals deferrals
	counts    counters
	failed    failures // the store's failures, logged
}

// New returns the Gate of policy p, admitting into queue and keeping the
// jobs a full queue refuses (overflow: defer) in deferred.
func New(p policies.Policy, queue, deferred Store, cfg Config) (*Gate, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Shapers == nil {
		cfg.Shapers = func() int64 { return 1 }
	}
	g := &Gate{cfg: cfg, log: cfg.Logger.With("policy", p.Name), queue: queue, deferred: deferred}
	if err := g.SetPolicy(p); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Gate) now() time.Time { return g.cfg.Now() }

// observe tells Config.Observe of a decision about a submission.
func (g *Gate) observe(key string, size int, at time.Time, o Outcome) {
	if g.cfg.Observe != nil {
		g.cfg.Observe(key, size, at, o)
	}
}

// Attach tells g the drainers of its queue and of its deferred store. It
// must be called once, before the first Admit.
func (g *Gate) Attach(drained, deferDrained View) {
	g.drained, g.deferDrained = drained, deferDrained
}

// Policy returns the policy g admits under now. Do not modify it.
func (g *Gate) Policy() *policies.Policy { return g.policy.Load() }

// SetPolicy makes p the policy g admits under, rebuilding the admission
// limiter when the admit block changed. On an error nothing changes.
func (g *Gate) SetPolicy(p policies.Policy) error {
	if old := g.policy.Load(); old == nil || !sameAdmit(old.Admit, p.Admit) {
		l, err := newAdmitLimiter(p, g.cfg)
		if err != nil {
			return err
		}
		g.limiter.Store(l)
	}
	g.policy.Store(&p)
	return nil
}

// MaxPayload is the largest payload the queue takes, in bytes.
func (g *Gate) MaxPayload() int { return g.queue.MaxPayload() }

// Request is one job offered to a Gate.
type Request struct {
	Key     string
	Payload []byte
	// Idempotency is the producer's Idempotency-Key, optional: retries of
	// one submission with the same key are stored once.
	Idempotency string
	// Header holds headers to keep with the job (traceparent…); may be nil.
	Header nats.Header
}

// dedupeID returns the Nats-Msg-Id of a request with an Idempotency-Key:
// the same for every retry of the same submission, so the store's dedupe
// makes retries idempotent. Without one it is "".
func dedupeID(policy string, r Request) string { return queue.DedupeID(policy, r.Key, r.Idempotency) }

// Outcome is what became of a job offered to a Gate.
type Outcome uint8

// The outcomes of an admission.
const (
	// Accepted: the job is stored in its key's queue.
	Accepted Outcome = iota + 1
	// Full: the key's queue is full and the job is not kept; come back
	// after Decision.RetryAfter, when a slot frees.
	Full
	// Deferred: the key's queue is full and the job is kept; it is
	// re-admitted when there is room, expected after Decision.RetryAfter.
	Deferred
	// Limited: the admission limit refused the job; come back after
	// Decision.RetryAfter.
	Limited
	// Unavailable: the store or the limiter failed; come back after
	// Decision.RetryAfter.
	Unavailable
	// Invalid: the request is bad (its key, its payload's size); Err says
	// what, wrapping queue.ErrBadKey or queue.ErrTooLarge.
	Invalid
)

var outcomeNames = [...]string{Accepted: "accepted", Full: "full", Deferred: "deferred", Limited: "limited", Unavailable: "unavailable", Invalid: "invalid"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// DefaultUnavailableWait is the Retry-After of an Unavailable decision.
const DefaultUnavailableWait = time.Second

// Decision is a Gate's answer to one request, like a Reservation of
// golang.org/x/time/rate: what happened, and when to come back.
type Decision struct {
	Outcome Outcome
	// ID is the job's id: set when Accepted or Deferred.
	ID string
	// Duplicate reports a resubmission found in the duplicate window:
	// nothing new was stored, ID is the first one's.
	Duplicate bool
	// Queued is how many jobs the key holds, this one included when it was
	// stored.
	Queued int64
	// ETA is, for an accepted job, how long until its delivery should start.
	ETA time.Duration
	// RetryAfter is when to come back (Full, Limited, Unavailable) or, for
	// a Deferred job, when it is expected to run.
	RetryAfter time.Duration
	// Limits describes the limit that decided, for rate-limit headers: the
	// key's queue, or the admission limit when Limited. Window is the
	// limit's period (the time to drain a full queue). Zero for Invalid and
	// Unavailable.
	Limits limiter.Result
	Window time.Duration
	// Reason says in words why the job was not accepted.
	Reason string
	// WaitingForConsumer is, for an accepted job, since when the
	// deliveries of its key's drainer (of any key of the policy) have
	// found no consumer (zero while they find one): its ETA holds once
	// one subscribes.
	WaitingForConsumer time.Time
	// Err is the cause of an Unavailable or Invalid decision.
	Err error
}

// Counts are a Gate's figures since it was made.
type Counts struct {
	Admitted      uint64 // jobs stored in their queue (202)
	Duplicates    uint64 // resubmissions answered from the duplicate window, or found there at re-admission
	Rejected      uint64 // jobs refused because their key's queue was full, not kept
	Unavailable   uint64 // requests answered Unavailable because the store failed
	Deferred      uint64 // jobs kept in the deferred store
	Readmitted    uint64 // deferred jobs put back into their key's queue
	Limited       uint64 // requests refused by the admission limit
	ShadowLimited uint64 // requests a shadow admission limit would have refused
	LimiterErrors uint64 // decisions the limiter's backend failed
	// LimiterDownSince is when the limiter's backend (Redis) began to fail
	// the decisions, until one succeeds again; zero while it answers.
	LimiterDownSince time.Time
}

type counters struct {
	admitted, duplicates, rejected, unavailable atomic.Uint64
	deferred, readmitted                        atomic.Uint64
	limited, shadowLimited, limiterErrors       atomic.Uint64
	limiterDown                                 atomic.Int64 // LimiterDownSince, Unix ns (0: none)
}

// Counts returns g's figures.
func (g *Gate) Counts() Counts {
	c := &g.counts
	return Counts{
		Admitted: c.admitted.Load(), Duplicates: c.duplicates.Load(), Rejected: c.rejected.Load(),
		Unavailable: c.unavailable.Load(), Deferred: c.deferred.Load(), Readmitted: c.readmitted.Load(),
		Limited: c.limited.Load(), ShadowLimited: c.shadowLimited.Load(), LimiterErrors: c.limiterErrors.Load(),
		LimiterDownSince: unixTime(c.limiterDown.Load()),
	}
}

// unixTime is ns as a time, zero for 0.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// Sweep forgets what g remembers of keys nobody submits to any more:
// expired full-queue verdicts, and deferrals the deferred drainer has seen.
// Call it now and then (every few seconds).
func (g *Gate) Sweep(now time.Time) {
	g.full.Range(func(k, v any) bool {
		if !now.Before(v.(time.Time)) {
			g.full.Delete(k)
		}
		return true
	})
	g.deferrals.sweep(g.deferDrained, now)
}
