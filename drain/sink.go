package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/queue"
)

// Delivery is one job on its way to a downstream consumer. Where it goes
// is the sink's business (NATSSink: a subject per key token).
type Delivery struct {
	Policy string // the policy name
	Token  string // the key's subject token (queue.EncodeKey)
	Msg    *queue.Msg
	// Took, when the sink sets it, is how long the delivery took at the
	// downstream, instead of the time Deliver ran: a simulated downstream
	// on a virtual clock answers at once and says so here. An adaptive
	// pace (Pace.Adapt) reads it as the delivery's latency.
	Took time.Duration
}

// Header returns the headers a delivery carries: Shaper-Job-Id,
// Shaper-Policy, Shaper-Key, Shaper-Enqueued-At, Shaper-Attempt and
// traceparent, plus any other non-NATS header the job was submitted with.
func (d *Delivery) Header() nats.Header { return d.Msg.Headers(d.Policy) }

// Sink hands a job to downstream consumers. Deliver returns nil only when the
// job was handed over; the drainer removes the job from its queue only then.
// An error wrapping a *RetryAfterError asks the drainer to pause the key, a
// *GiveUpError to dead-letter the job. Deliver is called without the
// Drainer's lock held, and may call the Drainer as a callback may (see the
// package docs). It must not keep d once it returned. Implementations must
// be safe for concurrent use.
type Sink interface {
	Deliver(ctx context.Context, d *Delivery) error
}

// ErrDelivery marks a failed delivery (no responders, a 5xx, a timeout).
var ErrDelivery = errors.New("delivery failed")

// RetryAfterError is returned by a sink whose downstream asked to be left
// alone for a while (HTTP 429 or 503 with Retry-After): the drainer pauses
// that key, and only that key, for After. It wraps ErrDelivery.
type RetryAfterError struct {
	After time.Duration
	Cause string
	// NotAttempted says the sink did not try at all (it knew the downstream
	// had no room): the pause is not a failed attempt.
	NotAttempted bool
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v: retry after %v: %s", ErrDelivery, e.After, e.Cause)
}

// GiveUpError is returned by a sink that knows the job can never be
// delivered (its deadline passed, say): the drainer dead-letters it at once
// with Reason. It wraps ErrDelivery.
type GiveUpError struct {
	Reason string
	Cause  string
}

func (e *GiveUpError) Error() string {
	return fmt.Sprintf("%v: giving up (%s): %s", ErrDelivery, e.Reason, e.Cause)
}

// Unwrap returns ErrDelivery.
func (e *GiveUpError) Unwrap() error { return ErrDelivery }

// Unwrap returns ErrDelivery.
func (e *RetryAfterError) Unwrap() error { return ErrDelivery }

// timedOut reports whether err ended a delivery because ctx, bounded by
// the sink's deliver.timeout, ran out: such a failure says so (noAnswer),
// where "context deadline exceeded" named neither the consumer nor the
// bound.
func timedOut(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil
}

// noAnswer says that no answer came within timeout, the sink's
// deliver.timeout.
func noAnswer(timeout time.Duration) string {
	return "no answer within deliver.timeout (" + timeout.String() + ")"
}
