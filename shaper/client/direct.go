package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

// Defaults for the zero DirectConfig.
const (
	// DefaultLaneRefresh is how often a Direct asks the shapers again
	// whether its lane is open, besides hearing of every change.
	DefaultLaneRefresh = 2 * time.Second
	// DefaultLaneTimeout bounds one such request.
	DefaultLaneTimeout = 2 * time.Second
)

// ErrLaneClosed: the direct lane of the policy may not be used (now). Its
// admission does more than store the job (an admit: limit, overflow:
// defer, a queue size lowered below its stream's limit), the policy is
// not served (then the error is ErrUnknownPolicy too), no shaper has said
// that the lane is open for a while, or the Direct was closed. Submit the
// job through the shaper instead (Client.Submit, NATS.Submit).
var ErrLaneClosed = errors.New("direct lane closed")

// DirectConfig holds a Direct's optional settings; the zero value means
// the documented defaults.
type DirectConfig struct {
	// LaneSubject is the root of the lane's subjects. Default
	// DefaultLaneSubject.
	LaneSubject string
	// Refresh is how often the shapers are asked again. Default
	// DefaultLaneRefresh.
	Refresh time.Duration
	// Stale is how long the lane stays open while no shaper answers:
	// past it, it closes until one does. Default ten Refresh periods.
	Stale time.Duration
	// Timeout bounds each request to the shapers. Default
	// DefaultLaneTimeout.
	Timeout time.Duration
	// StallWait, when set, is how long Publish waits for room while the
	// JetStream has its WithPublishAsyncMaxPending jobs unanswered, before
	// it fails with ErrUnavailable (jetstream.ErrTooManyStalledMsgs).
	// Default: JetStream's (200 ms), which costs nothing per publish.
	StallWait time.Duration
}

// Direct publishes one policy's jobs straight into its queue stream, with
// JetStream's own ack and per-key limit: the direct lane, for producers
// that need raw speed. It is open only for a policy whose admission does
// nothing that storing the job does not, as the shapers say (see Lane):
// each job is the very message the shaper's admission would have stored
// (the same subject, headers, id and, with an idempotency key, the same
// Nats-Msg-Id, so that the lane and the shaper dedupe each other's
// resubmissions), and the shaper's drain delivers it like any other. It
// learns of a change that closes the lane (a live change, a reload) from
// the shapers' announcement, and asks again every DirectConfig.Refresh.
//
// A Direct is safe for concurrent use; Close it when done.
type Direct struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	policy string
	cfg    DirectConfig
	ask    string // the subject to ask on: <LaneSubject>.<policy>
	opts   []jetstream.PublishOpt

	state  atomic.Pointer[laneState]
	mu     sync.Mutex // serialises changes of state, so that none comes after Close's
	closed bool
	sub    *nats.Subscription
	ctx    context.Context // of the requests keep makes, ended by Close
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// laneState is what a Direct knows of its lane: when it is open, where
// to publish; else why not (err).
type laneState struct {
	lane   Lane
	err    error
	layout queue.Layout
	full   time.Duration // a full key's RetryAfter
	at     time.Time     // when a shaper said so
}

// NewDirect asks the shapers about the direct lane of policy, over js's
// connection, and returns a Direct publishing through js when it is open.
// A closed lane is ErrLaneClosed (an unknown policy ErrUnknownPolicy too),
// and no shaper answering ErrUnavailable. Make js with
// jetstream.WithPublishAsyncTimeout, or a lost answer is waited for until
// the connection closes, and with jetstream.WithPublishAsyncMaxPending at
// the number of jobs to keep in flight.
func NewDirect(ctx context.Context, js jetstream.JetStream, policy string, cfg DirectConfig) (*Direct, error) {
	if tok, err := queue.EncodeKey(policy); err != nil || tok != policy {
		return nil, fmt.Errorf("client: policy name %q: %w", policy, ErrUnknownPolicy)
	}
	if cfg.LaneSubject == "" {
		cfg.LaneSubject = DefaultLaneSubject
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultLaneRefresh
	}
	if cfg.Stale <= 0 {
		cfg.Stale = 10 * cfg.Refresh
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultLaneTimeout
	}
	d := &Direct{js: js, nc: js.Conn(), policy: policy, cfg: cfg, ask: cfg.LaneSubject + "." + policy,
		done: make(chan struct{})}
	if cfg.StallWait > 0 {
		d.opts = []jetstream.PublishOpt{jetstream.WithStallWait(cfg.StallWait)}
	}
	sub, err := d.nc.Subscribe(d.ask+".state", func(m *nats.Msg) {
		var l Lane
		if json.Unmarshal(m.Data, &l) == nil {
			d.set(l)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("client: direct lane of %s: %w", policy, err)
	}
	d.sub = sub
	l, err := d.request(ctx)
	if err == nil {
		d.set(l)
		err = d.state.Load().err
	}
	if err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	go d.keep()
	return d, nil
}

// request asks a shaper for the lane.
func (d *Direct) request(ctx context.Context) (Lane, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	m, err := d.nc.RequestWithContext(ctx, d.ask, nil)
	if err != nil {
		return Lane{}, d.fail(http.StatusServiceUnavailable, "no shaper answered on "+d.ask, err)
	}
	var l Lane
	if err := json.Unmarshal(m.Data, &l); err != nil || l.Policy != d.policy {
		return Lane{}, fmt.Errorf("client: direct lane: %w: %q", ErrBadAnswer, m.Data)
	}
	return l, nil
}

// set makes l what d knows of its lane.
func (d *Direct) set(l Lane) {
	st := &laneState{lane: l, at: time.Now(), full: time.Duration(l.FullRetryAfterMs) * time.Millisecond}
	switch {
	case l.Policy != d.policy:
		return
	case l.Code == http.StatusNotFound:
		st.err = fmt.Errorf("client: direct lane of %s: %w: %w", d.policy, ErrLaneClosed, ErrUnknownPolicy)
	case !l.Open:
		st.err = fmt.Errorf("client: direct lane of %s: %w: %s", d.policy, ErrLaneClosed, l.Refused)
	case l.Stream == "" || l.Subject == "" || l.Epoch == "" || l.MaxPayload <= 0:
		st.err = fmt.Errorf("client: direct lane of %s: %w: the shaper's answer lacks where to publish", d.policy, ErrLaneClosed)
	default:
		st.layout = queue.NewLayout(l.Stream, l.Subject, l.MaxPayload)
	}
	d.store(st)
}

// store makes st the lane's state, unless d was closed.
func (d *Direct) store(st *laneState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.state.Store(st)
	}
}

// keep asks the shapers again every Refresh until Close, and closes the
// lane once none has answered for Stale.
func (d *Direct) keep() {
	defer close(d.done)
	t := time.NewTicker(d.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
		}
		l, err := d.request(d.ctx)
		if err == nil {
			d.set(l)
			continue
		}
		if d.ctx.Err() != nil {
			return
		}
		if st := d.state.Load(); st.err == nil && time.Since(st.at) > d.cfg.Stale {
			d.store(&laneState{lane: st.lane, at: st.at,
				err: fmt.Errorf("client: direct lane of %s: %w: no shaper has answered since %s: %w", d.policy, ErrLaneClosed, st.at.Format(time.RFC3339), err)})
		}
	}
}

// Close stops asking the shapers; the lane is closed from then on. Jobs
// published before keep their Ack.
func (d *Direct) Close() {
	d.once.Do(func() {
		d.store(&laneState{err: fmt.Errorf("client: direct lane of %s: %w: the Direct was closed", d.policy, ErrLaneClosed)})
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		d.sub.Unsubscribe()
		d.cancel()
		<-d.done
	})
}

// Lane returns the lane as a shaper last described it.
func (d *Direct) Lane() Lane { return d.state.Load().lane }

// Ack is a job published by the lane, waiting for JetStream's answer.
type Ack struct {
	st  *laneState
	key string
	f   jetstream.PubAckFuture
}

// Publish sends payload for key into the policy's queue without waiting
// for JetStream's answer (Ack.Result waits for it): jobs published one
// after another share the connection's writes and JetStream's acks. The
// options are Submit's but for WithRetry, which Publish ignores. It fails
// at once with ErrLaneClosed while the lane is closed, ErrBadRequest for
// a key that cannot be encoded, ErrTooLarge for a payload over the
// shaper's limit, and ErrUnavailable (wrapping JetStream's error) when the
// job cannot be sent.
func (d *Direct) Publish(key string, payload []byte, opts ...SubmitOption) (Ack, error) {
	st := d.state.Load()
	if st.err != nil {
		return Ack{}, st.err
	}
	job := queue.Job{Key: key, Payload: payload}
	if len(opts) > 0 {
		o := optionsOf(opts)
		if err := o.check(); err != nil { // the same key as over HTTP and NATS, or none
			return Ack{}, err
		}
		job.Dedupe = queue.DedupeID(d.policy, key, o.idempotencyKey)
		if validTraceparent(o.traceparent) {
			job.Header = nats.Header{HeaderTrace: {o.traceparent}}
		}
	}
	m, err := st.layout.Message(job)
	if err != nil {
		return Ack{}, d.laneError(err)
	}
	f, err := d.js.PublishMsgAsync(m, d.opts...)
	if err != nil {
		return Ack{}, d.laneError(queue.Classify("publish", err))
	}
	return Ack{st: st, key: key, f: f}, nil
}

// Result waits for JetStream's answer to the job, until ctx ends, and
// answers as Submit does: accepted, with the id of where the job is stored
// (GET /v1/jobs/{id} finds it queued, then delivered, as any job); or
// OutcomeRejected when JetStream's per-key limit found the key full, with
// RetryAfter the policy's outflow interval (an estimate: the shaper's own
// figure comes from its drain's schedule, which the lane cannot see). An
// accepted job's Queued and ETA are not known here: 0. Errors are
// ErrTooLarge and ErrUnavailable, wrapping JetStream's.
func (a Ack) Result(ctx context.Context) (Result, error) {
	if a.f == nil {
		return Result{}, fmt.Errorf("client: direct lane: %w: an Ack of no job", ErrBadRequest)
	}
	policy := a.st.lane.Policy
	select {
	case ack := <-a.f.Ok():
		return Result{Outcome: OutcomeAccepted, ID: queue.JobID(a.st.lane.Epoch, ack.Sequence), Policy: policy, Key: a.key,
			Duplicate: ack.Duplicate, Attempts: 1}, nil
	case err := <-a.f.Err():
		err = queue.Classify("publish", err)
		if errors.Is(err, queue.ErrFull) {
			return Result{Outcome: OutcomeRejected, Policy: policy, Key: a.key, Queued: int64(a.st.lane.Queue), RetryAfter: a.st.full,
				Detail: "queue of key " + strconv.Quote(a.key) + " is full (direct lane: JetStream's per-key limit)", Attempts: 1}, nil
		}
		return Result{}, laneError(policy, a.key, err)
	case <-ctx.Done():
		return Result{}, fmt.Errorf("client: direct lane: waiting for JetStream's answer: %w", ctx.Err())
	}
}

// Submit publishes payload for key and waits for JetStream's answer, as
// Publish and Ack.Result do; WithRetry waits a refusal's RetryAfter and
// publishes again, as it does for Client.Submit.
func (d *Direct) Submit(ctx context.Context, key string, payload []byte, opts ...SubmitOption) (Result, error) {
	r := retrier{within: optionsOf(opts).retryWithin}
	for {
		a, err := d.Publish(key, payload, opts...)
		var res Result
		if err == nil {
			res, err = a.Result(ctx)
		}
		if again, err := r.next(ctx, &res, err); !again {
			return res, err
		}
	}
}

func (d *Direct) laneError(err error) error { return laneError(d.policy, "", err) }

// laneError is the *Error of a job the lane could not store: the status the
// shaper would have answered it with, wrapping err.
func laneError(policy, key string, err error) error {
	code := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, queue.ErrBadKey):
		code = http.StatusBadRequest
	case errors.Is(err, queue.ErrTooLarge):
		code = http.StatusRequestEntityTooLarge
	}
	// The detail as the shaper words it, without the queue package's
	// prefixes ("queue: admit: bad key: empty" is "bad key: empty").
	detail := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "queue: admit: "), "queue: ")
	return &Error{StatusCode: code, Problem: Problem{Type: "about:blank", Title: http.StatusText(code), Status: code, Detail: detail,
		Policy: policy, Key: key}, op: "direct lane of " + policy, policyRoute: true, cause: err}
}

// fail is the *Error of a request to the shapers that failed with err.
func (d *Direct) fail(code int, detail string, err error) error {
	return &Error{StatusCode: code, Problem: Problem{Type: "about:blank", Title: http.StatusText(code), Status: code,
		Detail: detail + ": " + err.Error(), Policy: d.policy}, op: "direct lane of " + d.policy, cause: err}
}

// validTraceparent reports whether tp is a W3C traceparent the shaper
// would keep: one OpenTelemetry's propagator reads a valid span context
// from, as admission reads it (jobtrace). The shaper drops others.
func validTraceparent(tp string) bool {
	ctx := jobtrace.Extract(context.Background(), nats.Header{"traceparent": {tp}})
	return trace.SpanContextFromContext(ctx).IsValid()
}
