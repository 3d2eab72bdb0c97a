package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's publish header that dedupes a message.
const headerMsgID = "Nats-Msg-Id"

// Like the jetstream package, publish retries a request that found no
// responders (a stream leader being elected) twice, 250 ms apart.
const (
	noRespondersRetries = 2
	noRespondersWait    = 250 * time.Millisecond
)

// publish stores m (made by message) in q's stream and returns its
// sequence, and whether it was a duplicate of a message stored before with
// the same Nats-Msg-Id (then the sequence is that message's). It is
// jetstream's PublishMsg without its per-call costs, on the admission path
// of every job: no context of its own (the request times out after the
// queue's timeout, or earlier at ctx's deadline) and no JSON decoder for the
// PubAck.
func (q *Queue) publish(ctx context.Context, m *nats.Msg) (uint64, bool, error) {
	timeout := q.cfg.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	start := time.Now()
	nc := q.js.Conn()
	resp, err := nc.RequestMsg(m, timeout)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < noRespondersRetries; r++ {
		left := timeout - time.Since(start)
		if left <= noRespondersWait || ctx.Err() != nil {
			break
		}
		time.Sleep(noRespondersWait)
		resp, err = nc.RequestMsg(m, left-noRespondersWait)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return 0, false, jetstream.ErrNoStreamResponse
	case err != nil:
		return 0, false, err
	}
	return parsePubAck(resp.Data)
}

// parsePubAck reads a JetStream PubAck: {"stream":"S","seq":N} with
// "duplicate": true for a duplicate, or {"error":{...}} for a refusal, which
// comes back as a *jetstream.APIError for classify.
func parsePubAck(data []byte) (uint64, bool, error) {
	if bytes.HasPrefix(data, []byte(`{"error"`)) {
		var r struct {
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(data, &r); err != nil || r.Error == nil {
			return 0, false, fmt.Errorf("%w: %q", jetstream.ErrInvalidJSAck, data)
		}
		return 0, false, r.Error // its text says nats: API error: …
	}
	_, rest, ok := bytes.Cut(data, []byte(`"seq":`))
	if !ok {
		return 0, false, fmt.Errorf("%w: %q", jetstream.ErrInvalidJSAck, data)
	}
	rest = bytes.TrimLeft(rest, " ")
	n := 0
	for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
		n++
	}
	seq, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil || seq == 0 {
		return 0, false, fmt.Errorf("%w: %q", jetstream.ErrInvalidJSAck, data)
	}
	_, dup, _ := bytes.Cut(data, []byte(`"duplicate":`))
	return seq, bytes.HasPrefix(bytes.TrimLeft(dup, " "), []byte("true")), nil
}
