package drain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSSink publishes each job on a NATS connection, to the subject
// <prefix>.<key token> (NATSConfig.Subject is the prefix).
// With Confirm it sends a request and succeeds only when a consumer replies;
// with a JetStream stream capturing the subject it waits for the stream's
// acknowledgement. It is safe for concurrent use.
type NATSSink struct {
	nc      *nats.Conn
	prefix  string              // "<subject>."
	js      jetstream.JetStream // nil unless publishing into a stream
	confirm bool
	timeout time.Duration
}

var _ Sink = (*NATSSink)(nil)

// NATSConfig holds a NATSSink's settings. Subject is required; the zero
// value of the others publishes plainly (core NATS) with a 10 s timeout for
// requests.
type NATSConfig struct {
	Subject string        // the subject prefix: a job of key token t goes to <Subject>.<t>
	Stream  bool          // publish through JetStream and wait for the stream's ack
	Confirm bool          // deliver as a request; a reply is required
	Timeout time.Duration // bound on a confirmed or stream delivery
}

// errNoSubject is NewNATSSink's answer to a config without a subject.
var errNoSubject = errors.New("drain: nats sink: no subject prefix")

// NewNATSSink returns a sink publishing on nc.
func NewNATSSink(nc *nats.Conn, cfg NATSConfig) (*NATSSink, error) {
	if cfg.Subject == "" {
		return nil, errNoSubject
	}
	s := &NATSSink{nc: nc, prefix: cfg.Subject + ".", confirm: cfg.Confirm, timeout: cfg.Timeout}
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
	subject := s.prefix + d.Token
	m := &nats.Msg{Subject: subject, Data: d.Msg.Payload, Header: d.Header()}
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
			return fmt.Errorf("%w: %s: %v", ErrDelivery, subject, err)
		}
		// A status message from the server (a timeout or an error while the
		// cluster changes) is not a consumer's reply.
		if st := reply.Header.Get("Status"); st != "" && !strings.HasPrefix(st, "2") {
			return fmt.Errorf("%w: %s: server status %s %s", ErrDelivery, subject, st, reply.Header.Get("Description"))
		}
	default:
		if err := s.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("%w: publish: %v", ErrDelivery, err)
		}
	}
	return nil
}
