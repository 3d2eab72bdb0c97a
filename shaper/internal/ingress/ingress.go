// Package ingress takes jobs from producers, over HTTP (POST
// /v1/jobs/{policy}/{key}) and NATS (requests on <subject>.<policy>.<key
// token>), runs each through its policy's admission gate and answers with
// the gate's decision: 202 or "queued", 429 with Retry-After (full,
// deferred, limited), 4xx for bad input, 503 when a backend fails.
package ingress

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

// Defaults for the zero Config.
const (
	DefaultSubject = "shaper.submit"
	// DefaultBlockingWorkers bounds the NATS submissions that block
	// (admission limit, deferral) running at once.
	DefaultBlockingWorkers = 256
)

// Config holds what an Ingress needs. Gate and Serving are required.
type Config struct {
	// Gate returns the admission gate and queue of the named policy, nil
	// for an unknown one.
	Gate func(policy string) (*admission.Gate, *queue.Queue)
	// Serving reports whether jobs are taken now (false while starting and
	// shutting down: 503).
	Serving func() bool
	// Policies returns the names of the policies served, sorted, for the
	// 404 of an unknown one.
	Policies func() []string
	// Subject is the NATS ingress root. Default DefaultSubject.
	Subject string
	// Timeout bounds the subscription's flush at start. Default queue.DefaultTimeout.
	Timeout time.Duration
	// BlockingWorkers: see DefaultBlockingWorkers.
	BlockingWorkers int
	Logger          *slog.Logger
	// Tracer, when set, records a span of every submission (continuing the
	// producer's W3C trace context) and of storing its job. Default: no
	// spans; jobs still carry the producer's trace context, or a new one.
	Tracer trace.Tracer
	// Meter makes the admission latency histogram. Default: none.
	Meter metric.Meter
}

// Ingress takes submissions over HTTP and NATS. Safe for concurrent use.
type Ingress struct {
	cfg  Config
	log  *slog.Logger
	tel  *telemetry
	nats *natsIngress // nil until Subscribe
}

// New returns an Ingress; its NATS side starts with Subscribe.
func New(cfg Config) *Ingress {
	if cfg.Subject == "" {
		cfg.Subject = DefaultSubject
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = queue.DefaultTimeout
	}
	if cfg.BlockingWorkers <= 0 {
		cfg.BlockingWorkers = DefaultBlockingWorkers
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Ingress{cfg: cfg, log: cfg.Logger, tel: newTelemetry(cfg)}
}

// submission is one job offered by HTTP or NATS.
type submission struct {
	policy      string
	key         string
	payload     []byte
	idempotency string      // Idempotency-Key, optional
	trace       nats.Header // the W3C trace context the job is stored with (telemetry.begin)
	replayOf    string      // a replayed dead letter's: the dead job's id (queue.HeaderReplayOf)
}

// request returns the admission request of sub.
func (sub submission) request() admission.Request {
	h := sub.trace
	if sub.replayOf != "" {
		h = queue.JobHeader(h)
		h.Set(queue.HeaderReplayOf, sub.replayOf)
	}
	return admission.Request{Key: sub.key, Payload: sub.payload, Idempotency: sub.idempotency, Header: h}
}

// gate returns the gate of sub's policy, or the answer when there is none
// (shutting down, unknown policy).
func (in *Ingress) gate(sub submission) (*admission.Gate, *queue.Queue, answer, bool) {
	if !in.cfg.Serving() {
		a := failed(http.StatusServiceUnavailable, "shaper is shutting down")
		a.RetryAfterMs = httpapi.DefaultUnavailableWait.Milliseconds()
		return nil, nil, a, false
	}
	g, q := in.cfg.Gate(sub.policy)
	if g == nil {
		return nil, nil, failed(http.StatusNotFound, httpapi.UnknownPolicy(sub.policy, in.cfg.Policies())), false
	}
	return g, q, answer{}, true
}

// Submit runs one job through its policy's gate, blocking as long as the
// gate may (each backend call bounded by its timeout). For the replay of
// dead letters, in the trace the dead job was in (header's trace context,
// the dead letter's; nil: none), naming the dead job replayOf: it returns
// the job's id and whether the job was kept (accepted, or deferred), and
// when not, why (the answer's detail).
func (in *Ingress) Submit(ctx context.Context, policy, key string, payload []byte, header nats.Header, replayOf string) (string, bool, string) {
	a := in.admit(ctx, jobtrace.Carrier(header), submission{policy: policy, key: key, payload: payload, replayOf: replayOf}, transportReplay)
	if a.Status == statusQueued || a.Status == statusDeferred {
		return a.ID, true, ""
	}
	return a.ID, false, strconv.Itoa(a.Code) + ": " + a.Error
}

// refusedEarly is a, the answer to sub refused before its gate (a body
// too large or unreadable, a subject or key that does not parse), with its
// telemetry: counted invalid in the admission latency when its policy is
// served, as the gate's own refusals are. (HTTP counted a bad key and not
// a body too large, NATS the other way round.)
func (in *Ingress) refusedEarly(ctx context.Context, carrier propagation.TextMapCarrier, sub submission, tr transport, a answer) answer {
	_, span := in.tel.begin(ctx, carrier, &sub, tr)
	a.outcome = admission.Invalid
	_, _, _, known := in.gate(submission{policy: sub.policy})
	if known && a.Policy == "" {
		a.Policy, a.Key = sub.policy, sub.key // as a submission's problems say (a 413 said neither)
	}
	in.tel.end(span, a, known)
	return a
}

// admit runs sub, whose headers are in carrier, through its gate with its
// telemetry, deciding at its arrival.
func (in *Ingress) admit(ctx context.Context, carrier propagation.TextMapCarrier, sub submission, tr transport) answer {
	ctx, span := in.tel.begin(ctx, carrier, &sub, tr)
	a, known := in.submit(ctx, sub, span.start)
	in.tel.end(span, a, known)
	return a
}

// submit runs sub through its gate at now; known says whether a gate
// decided (a known policy while serving).
func (in *Ingress) submit(ctx context.Context, sub submission, now time.Time) (answer, bool) {
	g, _, a, ok := in.gate(sub)
	if !ok {
		return a, false
	}
	return answerOf(sub, g.Admit(ctx, sub.request(), now)), true
}

// answer is the Ingress's answer to a submission, rendered as HTTP or as a
// NATS reply.
type answer struct {
	Status       string `json:"status"` // queued | rejected | deferred | error
	ID           string `json:"id,omitempty"`
	Policy       string `json:"policy,omitempty"`
	Key          string `json:"key,omitempty"`
	Queued       int64  `json:"queued"`
	ETAms        int64  `json:"eta_ms"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	Duplicate    bool   `json:"duplicate,omitempty"`
	// WaitingSince is, for a queued job, since when the deliveries of its
	// key's drainer (of any key of the policy) have found no consumer: its
	// ETA holds once one subscribes.
	WaitingSince time.Time `json:"waiting_for_consumer_since,omitzero"`
	Code         int       `json:"code"`
	Error        string    `json:"error,omitempty"`
	// Deferred is set for the refusals only (status rejected or deferred):
	// whether the job was kept.
	Deferred *bool `json:"deferred,omitempty"`

	limits  limiter.Result // for the rate-limit headers, when there is a limit to describe (Limit > 0)
	window  time.Duration
	outcome admission.Outcome // the gate's, for telemetry
}

// The statuses of a NATS reply.
const (
	statusQueued   = "queued"
	statusRejected = "rejected"
	statusDeferred = "deferred"
	statusError    = "error"
)

func failed(code int, msg string) answer {
	return answer{Status: statusError, Code: code, Error: msg}
}

// kept and notKept are the values of answer.Deferred.
var kept, notKept = true, false

// answerOf renders the gate's decision d on sub.
func answerOf(sub submission, d admission.Decision) answer {
	a := answer{Policy: sub.policy, Key: sub.key, Error: d.Reason, RetryAfterMs: httpapi.CeilMs(d.RetryAfter), outcome: d.Outcome}
	if d.Limits.Limit > 0 {
		a.limits, a.window = d.Limits, d.Window
	}
	switch d.Outcome {
	case admission.Accepted:
		a.Status, a.Code = statusQueued, http.StatusAccepted
		a.ID, a.Duplicate, a.Queued, a.ETAms = d.ID, d.Duplicate, d.Queued, httpapi.CeilMs(d.ETA)
		a.WaitingSince = d.WaitingForConsumer.UTC()
	case admission.Full, admission.Limited:
		a.Status, a.Code, a.Deferred = statusRejected, http.StatusTooManyRequests, &notKept
		a.Queued = d.Queued
	case admission.Deferred:
		a.Status, a.Code, a.Deferred = statusDeferred, http.StatusTooManyRequests, &kept
		a.ID, a.Duplicate, a.Queued, a.ETAms = d.ID, d.Duplicate, d.Queued, a.RetryAfterMs
	case admission.Invalid:
		a.Status, a.Code, a.Key = statusError, http.StatusBadRequest, ""
		if errors.Is(d.Err, queue.ErrTooLarge) {
			a.Code = http.StatusRequestEntityTooLarge
		}
		a.limits = limiter.Result{}
	default: // Unavailable
		a.Status, a.Code = statusError, http.StatusServiceUnavailable
		a.limits = limiter.Result{}
	}
	return a
}
