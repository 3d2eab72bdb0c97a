package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/queue"
)

// DefaultNATSTimeout bounds a NATS submission whose NATSConfig names no
// Timeout. The shaper answers within its 2 s admission timeout, or a
// little later for a job it must defer.
const DefaultNATSTimeout = 5 * time.Second

// NATSConfig holds a NATS submitter's optional settings; the zero value
// means the documented defaults.
type NATSConfig struct {
	// SubmitSubject is the shaper's ingress root. Default DefaultSubmitSubject.
	SubmitSubject string
	// RecordSubject is the root of the shaper's recording (see Record).
	// Default DefaultRecordSubject.
	RecordSubject string
	// Timeout bounds each request, within ctx's own deadline. Default
	// DefaultNATSTimeout.
	Timeout time.Duration
}

// NATS submits jobs to shapers by NATS request. It is safe for concurrent
// use; its zero value is not usable (see NewNATS). A number of goroutines
// each calling Submit share the connection: that is how a producer keeps
// many submissions in flight.
type NATS struct {
	nc      *nats.Conn
	root    string // "<SubmitSubject>."
	timeout time.Duration
	// recordRoot is RecordSubject.
	recordRoot string
}

// NewNATS returns a submitter sending requests over nc, which the caller
// keeps owning (and closes).
func NewNATS(nc *nats.Conn, cfg NATSConfig) (*NATS, error) {
	if nc == nil {
		return nil, errors.New("client: nil NATS connection")
	}
	n := &NATS{nc: nc, root: cfg.SubmitSubject, timeout: cfg.Timeout, recordRoot: cfg.RecordSubject}
	if n.recordRoot == "" {
		n.recordRoot = DefaultRecordSubject
	}
	if n.root == "" {
		n.root = DefaultSubmitSubject
	}
	n.root += "."
	if n.timeout <= 0 {
		n.timeout = DefaultNATSTimeout
	}
	return n, nil
}

// Subject returns the subject a job for key of policy is submitted on:
// <root>.<policy>.<key token>. A policy name that is not one plain subject
// token ([A-Za-z0-9_-], as policy names are) is ErrUnknownPolicy; a key
// that cannot be encoded (empty, over queue.MaxKeyLen bytes, not UTF-8) is
// ErrBadRequest and queue.ErrBadKey.
func (n *NATS) Subject(policy, key string) (string, error) {
	// A plain token is its own encoding: exactly what a policy name may be.
	if tok, err := queue.EncodeKey(policy); err != nil || tok != policy {
		return "", fmt.Errorf("client: policy name %q: %w", policy, ErrUnknownPolicy)
	}
	token, err := queue.EncodeKey(key)
	if err != nil {
		return "", fmt.Errorf("client: %w: %w", ErrBadRequest, err)
	}
	return n.root + policy + "." + token, nil
}

// Submit offers payload to policy for key by a NATS request to
// <root>.<policy>.<key token>, with the raw key in the Shaper-Key header
// when a header can carry it unchanged (no CR or LF, no white space at
// either end).
// It answers as Client.Submit does: queued, rejected and deferred replies
// are a Result, an error reply an *Error with the HTTP status the same
// submission would have had; a reply that is not the contract's JSON is
// ErrBadAnswer; a failed request (nats.ErrNoResponders, a timeout) a
// wrapped transport error. The options are Client.Submit's.
func (n *NATS) Submit(ctx context.Context, policy, key string, payload []byte, opts ...SubmitOption) (Result, error) {
	subject, err := n.Subject(policy, key)
	if err != nil {
		return Result{}, err
	}
	o := optionsOf(opts)
	if err := o.check(); err != nil {
		return Result{}, err
	}
	r := o.retrier()
	for {
		res, err := n.submit(ctx, subject, key, payload, &o)
		if again, err := r.next(ctx, &res, err); !again {
			return res, err
		}
	}
}

// submit makes one submission.
func (n *NATS) submit(ctx context.Context, subject, key string, payload []byte, o *submitOptions) (Result, error) {
	h := nats.Header{}
	if headerSafe(key) {
		h[HeaderKey] = []string{key}
	}
	if o.idempotencyKey != "" {
		h[HeaderIdempotencyKey] = []string{o.idempotencyKey}
	}
	if o.traceparent != "" {
		h[HeaderTrace] = []string{o.traceparent}
	}
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	m, err := n.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Header: h, Data: payload})
	if errors.Is(err, nats.ErrMaxPayload) {
		// Refused before it left: the server's max_payload, below the
		// shaper's own limit. The same error as the shaper's 413.
		return Result{}, fmt.Errorf("client: request %s: %w: %d bytes are over the NATS server's max_payload (%d): %w",
			subject, ErrTooLarge, len(payload), n.nc.MaxPayload(), err)
	}
	if err != nil {
		return Result{}, fmt.Errorf("client: request %s: %w", subject, err)
	}
	var r Reply
	if err := decodeReply(m.Data, &r); err != nil {
		return Result{}, fmt.Errorf("client: request %s: %w: %v", subject, ErrBadAnswer, err)
	}
	if r.Status == 0 {
		return Result{}, fmt.Errorf("client: request %s: %w: a reply without a status", subject, ErrBadAnswer)
	}
	return resultOf(subject, r)
}

// headerSafe reports whether key travels in a NATS header unchanged:
// nats.go turns CR and LF into spaces and trims white space at both ends
// of a value. Any other key goes by its subject token alone.
func headerSafe(key string) bool {
	if key == "" || strings.ContainsAny(key, "\r\n") {
		return false
	}
	first, last := key[0], key[len(key)-1]
	return first != ' ' && first != '\t' && last != ' ' && last != '\t'
}

// resultOf turns a NATS reply into Submit's answer.
func resultOf(subject string, r Reply) (Result, error) {
	after := time.Duration(r.RetryAfterMs) * time.Millisecond
	switch r.Status {
	case ReplyQueued:
		return Result{Outcome: OutcomeAccepted, ID: r.ID, Policy: r.Policy, Key: r.Key, Queued: r.Queued,
			ETA: time.Duration(r.ETAMs) * time.Millisecond, Duplicate: r.Duplicate, WaitingForConsumer: r.WaitingForConsumer}, nil
	case ReplyRejected, ReplyDeferred:
		res := refusal(r.Status == ReplyDeferred, r.ID, r.Policy, r.Key, r.Queued, r.Error, after)
		res.Duplicate = r.Duplicate
		return res, nil
	}
	e := replyError(subject, r.Code, r.Error) // ReplyError
	e.Problem.Policy, e.Problem.Key, e.Problem.RetryAfterMs = r.Policy, r.Key, r.RetryAfterMs
	e.RetryAfter, e.policyRoute = after, true
	return Result{}, e
}

// replyError is the *Error of a NATS reply to a request on subject saying
// code (the HTTP status the same request would have had) and detail.
func replyError(subject string, code int, detail string) *Error {
	return &Error{StatusCode: code, op: "request " + subject,
		Problem: Problem{Type: "about:blank", Title: http.StatusText(code), Status: code, Detail: detail}}
}

// Job returns what the shaper knows of job id, as Client.Job does over
// HTTP, by a request to DefaultJobSubject.<id>: a producer that submits
// over NATS needs no HTTP to follow its jobs. An unknown id, or one past
// the horizon of job status, is ErrNotFound; no shaper answering, a
// transport error.
func (n *NATS) Job(ctx context.Context, id string) (Job, error) {
	subject := DefaultJobSubject + "." + id
	if !queue.ValidJobID(id) {
		return Job{}, replyError(subject, http.StatusNotFound, "no job "+strconv.Quote(id)+": not a job id")
	}
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	m, err := n.nc.RequestWithContext(ctx, subject, nil)
	if err != nil {
		return Job{}, fmt.Errorf("client: request %s: %w", subject, err)
	}
	var reply struct {
		Job
		JobError
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return Job{}, fmt.Errorf("client: request %s: %w: %v", subject, ErrBadAnswer, err)
	}
	if e := reply.JobError; e.Code != 0 {
		return Job{}, replyError(subject, e.Code, e.Error)
	}
	return reply.Job, nil
}
