package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Outcome says what became of a submission the shaper answered 202 or 429.
type Outcome uint8

// The outcomes of a submission.
const (
	// OutcomeAccepted: the job is stored in its key's queue (202).
	OutcomeAccepted Outcome = iota + 1
	// OutcomeRejected: the key's queue is full and the job was not kept
	// (429). Submit it again after Result.RetryAfter.
	OutcomeRejected
	// OutcomeDeferred: the key's queue is full and the policy defers: the
	// job is kept and runs later, expected after Result.RetryAfter (429
	// deferred). Do not submit it again.
	OutcomeDeferred
	// OutcomeLimited: the policy's admission limit refused the job, which
	// was not kept (429). Submit it again after Result.RetryAfter.
	OutcomeLimited
)

var outcomeNames = [...]string{OutcomeAccepted: "accepted", OutcomeRejected: "rejected", OutcomeDeferred: "deferred", OutcomeLimited: "limited"}

// String returns the outcome's name.
func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Retryable reports whether the job was refused and not kept, so that
// submitting it again later is the way to get it in.
func (o Outcome) Retryable() bool { return o == OutcomeRejected || o == OutcomeLimited }

// Result is the shaper's answer to a submission it accepted or refused
// with 429; any other answer is an error.
type Result struct {
	Outcome Outcome
	// ID is the job's id when it was accepted or deferred.
	ID string
	// Policy and Key are what the shaper says the job was for.
	Policy string
	Key    string
	// Queued is how many jobs the key holds with an accepted job. A NATS
	// submission refused because the key is full says at least its queue
	// size; over HTTP it is 0 for a refusal.
	Queued int64
	// ETA is when an accepted job is expected to be delivered.
	ETA time.Duration
	// RetryAfter is, for a refusal, when to submit again (the time until
	// the key's next slot frees, or until the admission limit allows);
	// for a deferred job, when it is expected to run. From the answer's
	// retry_after_ms, or its Retry-After header when it has none.
	RetryAfter time.Duration
	// Duplicate says an Idempotency-Key matched an earlier submission
	// within the duplicate window: nothing new was stored and ID is the
	// first one's.
	Duplicate bool
	// Detail is the shaper's explanation of a 429.
	Detail string
	// WaitingForConsumer is, for an accepted job, since when the
	// deliveries of its key's drainer have found no consumer (zero while
	// they find one), as Accepted.WaitingForConsumer: ETA holds once one
	// subscribes.
	WaitingForConsumer time.Time
	// Attempts is how many submissions were made: more than 1 after
	// WithRetry waited for a refusal's RetryAfter.
	Attempts int
}

// SubmitOption changes how Submit sends a job.
type SubmitOption func(*submitOptions)

type submitOptions struct {
	idempotencyKey string
	traceparent    string
	retryWithin    time.Duration
}

// WithIdempotencyKey sends key as the Idempotency-Key: a retry of the same
// submission within the shaper's two-minute duplicate window is stored
// once and answered with the first one's id (Result.Duplicate). An empty
// key is none; one a header cannot carry unchanged (CR or LF, white space
// at either end, only white space) is refused by Submit with ErrBadRequest
// before anything is sent.
func WithIdempotencyKey(key string) SubmitOption {
	return func(o *submitOptions) { o.idempotencyKey = key }
}

// WithTraceparent sends tp, a W3C traceparent, with the job; the shaper
// passes it on with the delivery (it makes a new one when tp is not valid).
func WithTraceparent(tp string) SubmitOption {
	return func(o *submitOptions) { o.traceparent = tp }
}

// WithRetry makes Submit wait and submit again while the job is refused and
// not kept (OutcomeRejected, OutcomeLimited), honouring each refusal's
// RetryAfter (exactly after the first refusal; after each further one with
// up to 10 ms, 20 ms, … at most 1 s more at random, so that producers
// refused together do not all come back together), as long as the next
// try starts within maxWait of the first one (and before ctx's deadline).
// It never resubmits a deferred job (it is kept).
//
// It also submits again after a failure that leaves the job's fate unknown:
// a 503 (ErrUnavailable: a job whose store timed out may have been stored)
// or a failed request (no shaper answering while one restarts, a timeout,
// a refused connection), after the 503's RetryAfter or 250 ms. That is
// safe because the submission carries an idempotency key: WithRetry gives
// it one (random, this Submit's) when WithIdempotencyKey gave none, so a
// try that was in fact stored is stored once, and the retry answers its
// id (Result.Duplicate). Other errors (a 4xx other than 429, ErrBadAnswer)
// are returned at once. Client.Submit and NATS.Submit do this; Direct.Submit
// retries refusals only.
func WithRetry(maxWait time.Duration) SubmitOption {
	return func(o *submitOptions) { o.retryWithin = maxWait }
}

func optionsOf(opts []SubmitOption) submitOptions {
	if len(opts) == 0 {
		return submitOptions{}
	}
	o := new(submitOptions) // on the heap (opt is any function): only when there are options
	for _, opt := range opts {
		opt(o)
	}
	return *o
}

// Submit offers payload to policy for key over HTTP (POST
// /v1/jobs/{policy}/{key}, the key escaped so that any key arrives as it
// is). A 202 or 429 is a Result; any other answer is an *Error
// (ErrUnknownPolicy, ErrBadRequest for a bad key, ErrTooLarge,
// ErrUnavailable, …), and a failed request a wrapped transport error.
//
// A 202 whose body cannot be read still returns its Result (the job is
// stored: do not submit it again) together with an error that is
// ErrBadAnswer. With WithRetry, when ctx ends during a wait Submit returns
// the last refusal with ctx's error.
func (c *Client) Submit(ctx context.Context, policy, key string, payload []byte, opts ...SubmitOption) (Result, error) {
	if policy == "" {
		return Result{}, errEmptyName
	}
	o := optionsOf(opts)
	if err := o.check(); err != nil {
		return Result{}, err
	}
	path := "/v1/jobs/" + segment(policy) + "/" + segment(key)
	r := o.retrier()
	for {
		res, err := c.submit(ctx, path, payload, &o)
		if again, err := r.next(ctx, &res, err); !again {
			return res, err
		}
	}
}

// submit makes one submission.
func (c *Client) submit(ctx context.Context, path string, payload []byte, o *submitOptions) (Result, error) {
	resp, err := c.doSubmit(ctx, path, payload, o)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	buf := buffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxProblem {
			buf.Reset()
			buffers.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxProblem)); err != nil {
		return Result{}, fmt.Errorf("client: POST %s: reading the answer: %w", path, err)
	}
	switch resp.StatusCode {
	case http.StatusAccepted:
		var a Accepted
		res := Result{Outcome: OutcomeAccepted}
		if err := decodeAccepted(buf.Bytes(), &a); err != nil {
			return res, fmt.Errorf("client: POST %s: 202 with %w: %v", path, ErrBadAnswer, err)
		}
		res.ID, res.Policy, res.Key, res.Queued, res.Duplicate = a.ID, a.Policy, a.Key, a.Queued, a.Duplicate
		res.ETA, res.WaitingForConsumer = time.Duration(a.ETAMs)*time.Millisecond, a.WaitingForConsumer
		return res, nil
	case http.StatusTooManyRequests:
		// A 429 without a problem (a proxy's) is a refusal all the same.
		var p Problem
		decodeProblem(buf.Bytes(), &p)
		res := refusal(p.Deferred, p.ID, p.Policy, p.Key, 0, p.Detail, retryAfter(p.RetryAfterMs, resp.Header))
		res.Duplicate = p.Duplicate
		return res, nil
	}
	return Result{}, errorFrom("POST "+path, resp, buf.Bytes(), true)
}

// doSubmit sends one submission.
func (c *Client) doSubmit(ctx context.Context, path string, payload []byte, o *submitOptions) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("client: POST %s: %w", path, err)
	}
	req.Header["User-Agent"] = c.agent
	req.Header["Content-Type"] = octetStream
	if c.auth != nil {
		req.Header["Authorization"] = c.auth
	}
	if o.idempotencyKey != "" {
		req.Header[HeaderIdempotencyKey] = []string{o.idempotencyKey}
	}
	if o.traceparent != "" {
		req.Header["Traceparent"] = []string{o.traceparent}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err) // a *url.Error: it names the method and URL
	}
	return resp, nil
}

// refusal is the Result of a 429: deferred, limited by the admission
// limit, or rejected because the key is full.
func refusal(deferred bool, id, policy, key string, queued int64, detail string, after time.Duration) Result {
	res := Result{Outcome: OutcomeRejected, Policy: policy, Key: key, Queued: queued, Detail: detail, RetryAfter: after}
	switch {
	case deferred:
		res.Outcome, res.ID = OutcomeDeferred, id
	case limitedDetail(detail):
		res.Outcome = OutcomeLimited
	}
	return res
}

// limitedDetail reports whether a 429's detail is the admission limit's.
// The contract has no field saying so (both 429s are "rejected", type
// about:blank): the shaper's detail of an admission limit's refusal starts
// with these words, and the client's tests hold a real shaper to them.
func limitedDetail(detail string) bool {
	return strings.HasPrefix(detail, "admission limit ")
}

// retryWait is how long a retrier waits after the attempts-th try was
// refused saying retryAfter: that long after the first refusal, exactly
// (a lone producer gets the slot it was told of), and after each further
// one that long plus a random spread of up to 10 ms, 20 ms, … at most a
// second: producers refused together are told the same instant, and only
// one of them can take the slot; without the spread they would all come
// back together, again and again. rnd is rand.Int64N.
func retryWait(retryAfter time.Duration, attempts int, rnd func(int64) int64) time.Duration {
	wait := max(retryAfter, time.Millisecond)
	if attempts < 2 {
		return wait
	}
	spread := min(retrySpreadMin<<min(attempts-2, 10), retrySpreadMax)
	return wait + time.Duration(rnd(int64(spread)+1))
}

// The spread retryWait adds after the second refusal, and its bound.
const (
	retrySpreadMin = 10 * time.Millisecond
	retrySpreadMax = time.Second
)

// retrier decides, after each try of a submission, whether WithRetry
// makes another one, and waits for it.
type retrier struct {
	within   time.Duration // WithRetry's bound; 0: no retries
	start    time.Time     // of the first try
	attempts int
	// unsure: the submission carries an idempotency key, so a failure
	// that leaves its fate unknown may be tried again.
	unsure bool
}

// check refuses an idempotency key a header cannot carry unchanged: HTTP
// refused it as a transport error, NATS changed it (CR and LF to spaces,
// white space trimmed, " " to none) where a retry must send the same key.
func (o *submitOptions) check() error {
	if o.idempotencyKey == "" || headerSafe(o.idempotencyKey) { // "": no key, as without the option
		return nil
	}
	return fmt.Errorf("client: idempotency key %q: %w: a header cannot carry it unchanged (it must not hold CR or LF, or start or end with white space)", o.idempotencyKey, ErrBadRequest)
}

// retrier returns the retrier of a Submit over HTTP or NATS with o,
// giving o an idempotency key of its own when it retries and has none.
func (o *submitOptions) retrier() retrier {
	if o.retryWithin > 0 && o.idempotencyKey == "" {
		o.idempotencyKey = "retry-" + strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36)
	}
	return retrier{within: o.retryWithin, unsure: o.idempotencyKey != ""}
}

// unknownFate is how long to wait after a failure that leaves a
// submission's fate unknown, when the shaper did not say.
const unknownFate = 250 * time.Millisecond

// next records the answer to one try (res, err) and reports whether to try
// again, having waited for it; when not, it returns the error to answer
// with: err, or ctx's when it ended while waiting.
func (r *retrier) next(ctx context.Context, res *Result, err error) (bool, error) {
	r.attempts++
	res.Attempts = r.attempts
	if r.within <= 0 {
		return false, err
	}
	after := res.RetryAfter
	if err != nil {
		if !r.unsure || !fateUnknown(ctx, err) {
			return false, err
		}
		after = unknownFate
		if e := (*Error)(nil); errors.As(err, &e) && e.RetryAfter > 0 {
			after = e.RetryAfter
		}
	} else if !res.Outcome.Retryable() {
		return false, nil
	}
	now := time.Now()
	if r.attempts == 1 {
		r.start = now // close enough: the first answer is in
	}
	wait := retryWait(after, r.attempts, rand.Int64N)
	next := now.Add(wait)
	if next.Sub(r.start) > r.within {
		return false, err
	}
	if deadline, ok := ctx.Deadline(); ok && next.After(deadline) {
		return false, err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		return false, fmt.Errorf("client: waiting to submit again: %w", ctx.Err())
	}
}

// fateUnknown reports whether err, a failed submission, may have stored the
// job or may pass if tried again: a 503, or a request that failed (no
// shaper answering, a timeout, a connection refused or cut), while ctx is
// still alive. Not the shaper's other answers, nor ErrBadAnswer (a 202 that
// could not be read: the job is stored), nor a payload NATS refused.
func fateUnknown(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, ErrBadAnswer) || errors.Is(err, ErrTooLarge) {
		return false
	}
	if e := (*Error)(nil); errors.As(err, &e) {
		return e.StatusCode == http.StatusServiceUnavailable
	}
	if u := (*url.Error)(nil); errors.As(err, &u) {
		var op *net.OpError
		return u.Timeout() || errors.As(u.Err, &op) || errors.Is(u.Err, io.EOF) || errors.Is(u.Err, io.ErrUnexpectedEOF)
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionReconnecting)
}
