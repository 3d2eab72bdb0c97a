package drain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/queue"
)

// Delivery is one job on its way to a downstream consumer.
type Delivery struct {
	Policy  string // the policy name
	Subject string // the delivery subject: <deliver subject>.<key token>
	Msg     *queue.Msg
}

// Header returns the headers a delivery carries: Shaper-Job-Id,
// Shaper-Policy, Shaper-Key, Shaper-Enqueued-At, Shaper-Attempt and
// traceparent, plus any other non-NATS header the job was submitted with.
func (d *Delivery) Header() nats.Header { return d.Msg.Headers(d.Policy) }

// Sink hands a job to downstream consumers. Deliver returns nil only when the
// job was handed over; the drainer removes the job from its queue only then.
// An error wrapping a *RetryAfterError asks the drainer to pause the key.
// Implementations must be safe for concurrent use.
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

// NATSSink publishes each job to its delivery subject on a NATS connection.
// With Confirm it sends a request and succeeds only when a consumer replies;
// with a JetStream stream capturing the subject it waits for the stream's
// acknowledgement. It is safe for concurrent use.
type NATSSink struct {
	nc      *nats.Conn
	js      jetstream.JetStream // nil unless publishing into a stream
	confirm bool
	timeout time.Duration
}

var _ Sink = (*NATSSink)(nil)

// NATSConfig holds a NATSSink's optional settings. The zero value publishes
// plainly (core NATS) with a 10 s timeout for requests.
type NATSConfig struct {
	Stream  bool          // publish through JetStream and wait for the stream's ack
	Confirm bool          // deliver as a request; a reply is required
	Timeout time.Duration // bound on a confirmed or stream delivery
}

// NewNATSSink returns a sink publishing on nc.
func NewNATSSink(nc *nats.Conn, cfg NATSConfig) (*NATSSink, error) {
	s := &NATSSink{nc: nc, confirm: cfg.Confirm, timeout: cfg.Timeout}
	if s.timeout <= 0 {
		s.timeout = 10 * time.Second
	}
	if cfg.Stream {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, fmt.Errorf("drain: nats sink: %w", err)
		}
		s.js = js
	}
	return s, nil
}

// Deliver implements Sink.
func (s *NATSSink) Deliver(ctx context.Context, d *Delivery) error {
	m := &nats.Msg{Subject: d.Subject, Data: d.Msg.Payload, Header: d.Header()}
	switch {
	case s.js != nil:
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		// The job id dedupes a redelivery after a crash inside the stream's window.
		if _, err := s.js.PublishMsg(ctx, m, jetstream.WithMsgID(d.Msg.ID)); err != nil {
			return fmt.Errorf("%w: publish to stream: %v", ErrDelivery, err)
		}
	case s.confirm:
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		reply, err := s.nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrDelivery, d.Subject, err)
		}
		// A status message from the server (a timeout or an error while the
		// cluster changes) is not a consumer's reply.
		if st := reply.Header.Get("Status"); st != "" && !strings.HasPrefix(st, "2") {
			return fmt.Errorf("%w: %s: server status %s %s", ErrDelivery, d.Subject, st, reply.Header.Get("Description"))
		}
	default:
		if err := s.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("%w: publish: %v", ErrDelivery, err)
		}
	}
	return nil
}
