// Package ingress takes jobs from producers, over HTTP (POST
// /v1/jobs/{policy}/{key}) and NATS (requests on <subject>.<policy>.<key
// token>), runs each through its policy's admission gate and answers with
// the gate's decision: 202 or "queued", 429 with Retry-After (full,
// deferred, limited), 4xx for bad input, 503 when a backend fails.
package ingress

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
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
	// Subject is the NATS ingress root. Default DefaultSubject.
	Subject string
	// Timeout bounds the subscription's flush at start. Default queue.DefaultTimeout.
	Timeout time.Duration
	// BlockingWorkers: see DefaultBlockingWorkers.
	BlockingWorkers int
	Logger          *slog.Logger
}

// Ingress takes submissions over HTTP and NATS. Safe for concurrent use.
type Ingress struct {
	cfg  Config
	log  *slog.Logger
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
	return &Ingress{cfg: cfg, log: cfg.Logger}
}

// submission is one job offered by HTTP or NATS.
type submission struct {
	policy      string
	key         string
	payload     []byte
	idempotency string // Idempotency-Key, optional
	traceparent string // W3C trace context, optional
}

// request returns the admission request of sub.
func (sub submission) request() admission.Request {
	h := nats.Header{}
	h[queue.HeaderTrace] = []string{traceparent(sub.traceparent)}
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
		return nil, nil, failed(http.StatusNotFound, "unknown policy "+httpapi.Quote(sub.policy)), false
	}
	return g, q, answer{}, true
}

// Submit runs one job through its policy's gate, blocking as long as the
// gate may (each backend call bounded by its timeout). For the replay of
// dead letters: it returns the job's id and whether the job was kept
// (accepted, or deferred).
func (in *Ingress) Submit(ctx context.Context, policy, key string, payload []byte) (string, bool) {
	a := in.submit(ctx, submission{policy: policy, key: key, payload: payload})
	return a.ID, a.Status == statusQueued || a.Status == statusDeferred
}

func (in *Ingress) submit(ctx context.Context, sub submission) answer {
	g, _, a, ok := in.gate(sub)
	if !ok {
		return a
	}
	return answerOf(sub, g.Admit(ctx, sub.request(), time.Now()))
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
	Deferred     bool   `json:"deferred"`
	Duplicate    bool   `json:"duplicate,omitempty"`
	Code         int    `json:"code"`
	Error        string `json:"error,omitempty"`

	limits *limiter.Result // for the rate-limit headers, when there is a limit to describe
	window time.Duration
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

// answerOf renders the gate's decision d on sub.
func answerOf(sub submission, d admission.Decision) answer {
	a := answer{Policy: sub.policy, Key: sub.key, Error: d.Reason, RetryAfterMs: httpapi.CeilMs(d.RetryAfter)}
	if d.Limits.Limit > 0 {
		a.limits, a.window = &d.Limits, d.Window
	}
	switch d.Outcome {
	case admission.Accepted:
		a.Status, a.Code = statusQueued, http.StatusAccepted
		a.ID, a.Duplicate, a.Queued, a.ETAms = d.ID, d.Duplicate, d.Queued, httpapi.CeilMs(d.ETA)
	case admission.Full, admission.Limited:
		a.Status, a.Code = statusRejected, http.StatusTooManyRequests
		a.Queued = d.Queued
	case admission.Deferred:
		a.Status, a.Code, a.Deferred = statusDeferred, http.StatusTooManyRequests, true
		a.ID, a.Duplicate, a.Queued, a.ETAms = d.ID, d.Duplicate, d.Queued, a.RetryAfterMs
	case admission.Invalid:
		a.Status, a.Code, a.Key = statusError, http.StatusBadRequest, ""
		if errors.Is(d.Err, queue.ErrTooLarge) {
			a.Code = http.StatusRequestEntityTooLarge
		}
		a.limits = nil
	default: // Unavailable
		a.Status, a.Code = statusError, http.StatusServiceUnavailable
		a.limits = nil
	}
	return a
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
