package drain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// NATSSink hands each job to the consumers of the subject
// <prefix>.<key token> (NATSConfig.Subject is the prefix) on a NATS
// connection. By default a delivery is a request that a consumer answers
// once it has taken the job (at least once); "no responders" — no consumer
// online — is neither an attempt nor a failure: the key waits and probes
// again with a bounded backoff (a *RetryAfterError with NotAttempted).
// With Publish it publishes and forgets (at most once), flushing the
// connection before it returns, so that a job is removed from its queue
// only once the server has it. With a JetStream stream capturing the
// subject it waits for the stream's acknowledgement. It is safe for
// concurrent use.
type NATSSink struct {
	nc      *nats.Conn
	prefix  string              // "<subject>."
	js      jetstream.JetStream // nil unless publishing into a stream
	publish bool
	timeout time.Duration

	absent  atomic.Int32 // deliveries in a row that found no consumer
	waiting atomic.Int64 // unix nanoseconds since when no consumer answered; 0 when one did
}

var _ Sink = (*NATSSink)(nil)

// NATSConfig holds a NATSSink's settings. Subject is required; the zero
// value of the others sends requests with a 10 s timeout.
type NATSConfig struct {
	Subject string        // the subject prefix: a job of key token t goes to <Subject>.<t>
	Stream  bool          // publish through JetStream and wait for the stream's ack
	Publish bool          // publish and forget (at most once) instead of a request
	Timeout time.Duration // bound on one delivery
}

// Bounds of the wait between probes of a subject without consumers: the
// first wait, doubled for each further delivery in a row that found none.
const (
	ProbeMin = 50 * time.Millisecond
	ProbeMax = 2 * time.Second
)

// errNoSubject is NewNATSSink's answer to a config without a subject.
var errNoSubject = errors.New("drain: nats sink: no subject prefix")

// NewNATSSink returns a sink delivering on nc.
func NewNATSSink(nc *nats.Conn, cfg NATSConfig) (*NATSSink, error) {
	if cfg.Subject == "" {
		return nil, errNoSubject
	}
	s := &NATSSink{nc: nc, prefix: cfg.Subject + ".", publish: cfg.Publish, timeout: cfg.Timeout}
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

// Waiting returns since when deliveries have found no consumer to answer
// them; the zero time when the last delivery was taken.
func (s *NATSSink) Waiting() time.Time {
	if ns := s.waiting.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Deliver implements Sink.
func (s *NATSSink) Deliver(ctx context.Context, d *Delivery) error {
	subject := s.prefix + d.Token
	m := &nats.Msg{Subject: subject, Data: d.Msg.Payload, Header: d.Header()}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	switch {
	case s.js != nil:
		// The job id dedupes a redelivery after a crash inside the stream's window.
		if _, err := s.js.PublishMsg(ctx, m, jetstream.WithMsgID(d.Msg.ID)); err != nil {
			return fmt.Errorf("%w: publish to stream: %w", ErrDelivery, err)
		}
	case s.publish:
		if err := s.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("%w: publish: %v", ErrDelivery, err)
		}
		// The job leaves its queue next: the server must have it first.
		if err := s.nc.FlushWithContext(ctx); err != nil {
			return fmt.Errorf("%w: publish: flush: %v", ErrDelivery, err)
		}
	default:
		reply, err := s.nc.RequestMsgWithContext(ctx, m)
		if errors.Is(err, nats.ErrNoResponders) {
			return s.absentConsumer(subject)
		}
		if timedOut(ctx, err) {
			return fmt.Errorf("%w: %s: %s: %w", ErrDelivery, subject, noAnswer(s.timeout), err) // a timeout stays one (Pace.Adapt)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrDelivery, subject, err) // a timeout stays one (Pace.Adapt)
		}
		// A status message from the server (a timeout or an error while the
		// cluster changes) is not a consumer's reply.
		if st := reply.Header.Get("Status"); st != "" && !strings.HasPrefix(st, "2") {
			return fmt.Errorf("%w: %s: server status %s %s", ErrDelivery, subject, st, reply.Header.Get("Description"))
		}
		// An error reply of a NATS micro service (Request.Error) is a
		// consumer saying it did not take the job: a failed attempt.
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
			return fmt.Errorf("%w: %s: the consumer answered error %s: %s", ErrDelivery, subject, code, reply.Header.Get(micro.ErrorHeader))
		}
	}
	if s.absent.Load() != 0 {
		s.absent.Store(0)
		s.waiting.Store(0)
	}
	return nil
}

// absentConsumer notes that nobody answered on subject, and asks the
// drainer to keep the job and probe again after a backoff that doubles
// with each delivery in a row that found no consumer, up to ProbeMax.
func (s *NATSSink) absentConsumer(subject string) error {
	n := s.absent.Add(1)
	if n == 1 {
		s.waiting.CompareAndSwap(0, time.Now().UnixNano())
	}
	wait := ProbeMax
	if n < 16 {
		wait = min(ProbeMax, ProbeMin<<(n-1))
	}
	return &RetryAfterError{After: wait, Cause: WaitingForConsumer + " (no responders on " + subject + ")", NotAttempted: true}
}

// WaitingForConsumer is why a job of a policy whose deliveries find no
// consumer stays queued.
const WaitingForConsumer = "waiting for a consumer"
