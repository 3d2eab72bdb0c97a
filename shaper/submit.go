package shaper

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// Submission is one job offered to the Shaper by HTTP or NATS.
type submission struct {
	policy      string
	key         string
	payload     []byte
	idempotency string // Idempotency-Key, optional
	traceparent string // W3C trace context, optional
}

// Outcome is the Shaper's answer to a submission, rendered as HTTP or as a
// NATS reply.
type outcome struct {
	Status       string `json:"status"` // queued | rejected | deferred | error
	ID           string `json:"id,omitempty"`
	Policy       string `json:"policy,omitempty"`
	Key          string `json:"key,omitempty"`
	Queued       int64  `json:"queued"`
	ETAms        int64  `json:"eta_ms"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	Deferred     bool   `json:"deferred"`
	Duplicate    bool   `json:"duplicate,omitempty"`
	Code         int    `json:"code"`
	Error        string `json:"error,omitempty"`

	limits *limiter.Result // for the rate-limit headers, when there is a queue to describe
	window time.Duration
}

const (
	statusQueued   = "queued"
	statusRejected = "rejected"
	statusDeferred = "deferred"
	statusError    = "error"
)

func failed(code int, msg string) outcome {
	return outcome{Status: statusError, Code: code, Error: msg}
}

// submit runs a submission through the admission path: policy, key, size,
// admission limit, then the queue. It never blocks longer than the queue
// timeout (and the admission limiter's).
func (s *Shaper) submit(ctx context.Context, sub submission) outcome {
	t, o := s.check(ctx, sub, true)
	if t == nil {
		return o
	}
	var rec queue.Receipt
	err := t.err
	if err == nil {
		rec, err = t.rt.q.Admit(ctx, t.job)
	}
	return s.settle(ctx, t, rec, err)
}

// ticket is a submission that passed every check and waits for the queue's
// answer (or, with err set, already has it).
type ticket struct {
	rt     *runtime
	p      *policies.Policy
	token  string
	job    queue.Job
	base   outcome
	now    time.Time
	defers bool
	err    error // the answer known without asking JetStream (queue.ErrFull), or nil
	// slow: the submission needs a call that blocks (the admission limiter,
	// a deferral) before anything else; check(…, false) stops there.
	slow bool
}

// slowTicket is what check(…, false) returns for a submission to run
// through submit instead.
var slowTicket = &ticket{slow: true}

// check runs everything before the queue: it returns a ticket, or the
// final outcome with a nil ticket. With block false it does nothing that
// waits on the network: a submission that needs the admission limiter or a
// deferral comes back as a ticket marked slow, before any side effect, to
// be run again through submit.
func (s *Shaper) check(ctx context.Context, sub submission, block bool) (*ticket, outcome) {
	if !s.serving.Load() {
		o := failed(http.StatusServiceUnavailable, "shaper is shutting down")
		o.RetryAfterMs = DefaultUnavailableWait.Milliseconds()
		return nil, o
	}
	rt := s.runtime(sub.policy)
	if rt == nil {
		return nil, failed(http.StatusNotFound, "unknown policy "+quote(sub.policy))
	}
	p := rt.pol.Load()
	token, err := queue.EncodeKey(sub.key)
	if err != nil {
		return nil, failed(http.StatusBadRequest, err.Error())
	}
	if len(sub.payload) > rt.q.MaxPayload() {
		return nil, failed(http.StatusRequestEntityTooLarge, errTooLarge(rt.q.MaxPayload()))
	}
	if !block && rt.limited(p) {
		return slowTicket, outcome{}
	}
	if o, ok := s.admitLimit(ctx, rt, p, sub.key); !ok {
		return nil, o
	}
	now := time.Now()
	defers := p.Overflow == policies.OverflowDefer
	until, known := rt.fullUntil.Load(token)
	if known && !now.Before(until.(time.Time)) {
		rt.fullUntil.Delete(token)
		known = false
	}
	if known && !defers {
		// A flood on a full key: answered without making a job at all.
		rt.counter.rejected.Add(1)
		return nil, s.full(rt, p, token, outcome{Policy: p.Name, Key: sub.key}, now)
	}
	h := nats.Header{}
	h.Set(queue.HeaderTrace, traceparent(sub.traceparent))
	// No id yet: the queue names the job after where it stores it.
	job := queue.Job{Dedupe: dedupeID(sub), Key: sub.key, Payload: sub.payload, Header: h}
	if defers && rt.deferredAhead(token, now) {
		// Deferred jobs of this key go first: a slot that frees is theirs.
		if !block {
			return slowTicket, outcome{}
		}
		return nil, s.deferJob(ctx, rt, p, token, job, now)
	}
	t := &ticket{rt: rt, p: p, token: token, job: job, base: outcome{Policy: p.Name, Key: sub.key}, now: now, defers: defers}
	switch {
	case known:
		t.err = queue.ErrFull // JetStream said so, and no slot frees before then
	case p.Queue < rt.q.Limit() && rt.d.Key(token, now).Queued >= int64(p.Queue):
		// The queue size was lowered over live jobs: the stream still allows
		// more, so the smaller size is enforced here (per shaper, not atomic).
		t.err = queue.ErrFull
	}
	if t.err != nil && defers && !block {
		return slowTicket, outcome{} // settle would defer it
	}
	return t, outcome{}
}

// settle turns the queue's answer to t (rec, or err) into the outcome. For
// a defer policy whose key is full it defers the job, which blocks.
func (s *Shaper) settle(ctx context.Context, t *ticket, rec queue.Receipt, err error) outcome {
	rt, p, token, now := t.rt, t.p, t.token, t.now
	if t.err == nil && errors.Is(err, queue.ErrFull) && rt.d.Active() {
		// JetStream refused it and this shaper drains the key, so it knows
		// exactly when a slot frees: until then the answer cannot change.
		if room := rt.d.Key(token, now).RoomIn; room > 0 {
			rt.fullUntil.Store(token, now.Add(room))
		}
	}
	switch {
	case err == nil:
		// No job record is written: GET /v1/jobs/{id} finds a queued job
		// in its queue by the id (see jobs.go).
		if rec.Duplicate {
			rt.counter.duplicates.Add(1)
		} else {
			rt.counter.admitted.Add(1)
		}
		o := t.base
		o.ID = rec.ID
		return s.accepted(rt, p, token, o, rec, now)
	case errors.Is(err, queue.ErrFull) && t.defers:
		return s.deferJob(ctx, rt, p, token, t.job, now)
	case errors.Is(err, queue.ErrFull):
		rt.counter.rejected.Add(1)
		return s.full(rt, p, token, t.base, now)
	case errors.Is(err, queue.ErrTooLarge):
		return failed(http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, queue.ErrBadKey):
		return failed(http.StatusBadRequest, err.Error())
	default:
		rt.counter.unavailable.Add(1)
		s.log.Warn("admission failed", "policy", p.Name, "err", err)
		return unavailable("queue backend", err)
	}
}

// unavailable is the 503 answer when what (a JetStream-backed part of the
// shaper) failed with err: the producer may try again after
// DefaultUnavailableWait.
func unavailable(what string, err error) outcome {
	o := failed(http.StatusServiceUnavailable, what+" unavailable: "+err.Error())
	o.RetryAfterMs = DefaultUnavailableWait.Milliseconds()
	return o
}

func (s *Shaper) accepted(rt *runtime, p *policies.Policy, token string, o outcome, rec queue.Receipt, now time.Time) outcome {
	st := rt.d.Key(token, now)
	queued, waiting := st.Queued, st.Waiting
	if rec.Seq > st.Seen {
		queued, waiting = queued+1, waiting+1
	}
	queued = max(queued, 1)
	iv := p.Outflow.Interval()
	eta := st.NextIn + time.Duration(max(waiting-1, 0))*iv
	o.Status, o.Code, o.Duplicate = statusQueued, http.StatusAccepted, rec.Duplicate
	o.Queued, o.ETAms = queued, ceilMs(eta)
	o.limits = &limiter.Result{
		Allowed:   true,
		Limit:     int64(p.Queue),
		Remaining: max(int64(p.Queue)-queued, 0),
		Reset:     st.NextIn + time.Duration(max(waiting-1, 0))*iv + iv,
	}
	o.window = time.Duration(p.Queue) * iv
	return o
}

func (s *Shaper) full(rt *runtime, p *policies.Policy, token string, o outcome, now time.Time) outcome {
	st := rt.d.Key(token, now)
	iv := p.Outflow.Interval()
	o.Status, o.Code = statusRejected, http.StatusTooManyRequests
	o.Queued = max(st.Queued, int64(p.Queue))
	o.RetryAfterMs = max(ceilMs(st.RoomIn), 1)
	o.ETAms = 0
	o.ID = "" // a rejected job is not kept
	o.Error = "queue of key " + quote(o.Key) + " is full"
	o.limits = &limiter.Result{
		Allowed:    false,
		Limit:      int64(p.Queue),
		Remaining:  0,
		RetryAfter: st.RoomIn,
		Reset:      st.NextIn + time.Duration(o.Queued)*iv,
	}
	o.window = time.Duration(p.Queue) * iv
	return o
}

// dedupeID returns the Nats-Msg-Id of a submission with an
// Idempotency-Key: the same for every retry of the same submission, so
// JetStream's dedupe makes retries idempotent. Without a key it is "".
func dedupeID(sub submission) string {
	if sub.idempotency == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(sub.policy + "\x00" + sub.key + "\x00" + sub.idempotency))
	return "i" + hex.EncodeToString(sum[:12])
}

// traceparent returns tp when it is a W3C traceparent, else a new one. Trace
// ids need to be unique, not secret: they come from math/rand/v2, which
// costs no system call. A new one is not sampled (flags 00): the shaper
// records no spans, and nats-server parses every header of a message whose
// traceparent is sampled, at each hop, to look for a trace destination.
func traceparent(tp string) string {
	if validTraceparent(tp) {
		return tp
	}
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64()|1) // never all zero
	binary.LittleEndian.PutUint64(b[16:], rand.Uint64()|1)
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-00"
}

func validTraceparent(tp string) bool {
	if len(tp) != 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	for i, c := range tp {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return tp[3:35] != "00000000000000000000000000000000" && tp[36:52] != "0000000000000000"
}

func ceilMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// quote quotes s for a message, cut to 64 runes.
func quote(s string) string {
	if r := []rune(s); len(r) > 64 {
		s = string(r[:64]) + "…"
	}
	return strconv.Quote(s)
}

func errTooLarge(limit int) string {
	return "payload too large: at most " + strconv.Itoa(limit) + " bytes"
}
