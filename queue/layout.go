package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Layout is where and how a queue stores its jobs: its stream, the subject
// prefix of its keys and its payload limit. Message makes, from a Job, the
// message Admit publishes; a producer that publishes straight into the
// queue's stream (client.Direct, the direct lane) makes its messages with
// it, so that they are the very ones Admit would have stored. Get a
// Layout from Queue.Layout or NewLayout.
type Layout struct {
	Stream     string // the stream: <StreamPrefix><policy>
	Prefix     string // the subject of the key with token t is Prefix+t: "<SubjectRoot>.<policy>."
	MaxPayload int    // the largest payload, in bytes
}

// NewLayout returns the Layout of a queue stored in stream, on subjects
// prefix+<key token>, taking payloads of up to maxPayload bytes.
func NewLayout(stream, prefix string, maxPayload int) Layout {
	return Layout{Stream: stream, Prefix: prefix, MaxPayload: maxPayload}
}

// Message checks job and returns the message that stores it: on its key's
// subject, with Nats-Msg-Id set to the job's ID or Dedupe, and only the
// headers that cannot be derived when the job is read (see Queue.Admit):
// most jobs have none at all, which spares JetStream from searching a
// header for its own on every store (about a microsecond of CPU for a
// small job, see BenchmarkDirectLane). No Nats-Expected-Stream either: no other stream can capture
// a queue's subjects while it exists (JetStream refuses overlapping
// subjects), so it would only guard a queue stream deleted under a running
// shaper and replaced by another capturing its subjects. Errors wrap
// ErrBadKey, ErrBadID and ErrTooLarge.
func (l *Layout) Message(job Job) (*nats.Msg, error) {
	token, err := EncodeKey(job.Key)
	if err != nil {
		return nil, fmt.Errorf("queue: admit: %w", err)
	}
	if job.ID != "" && !ValidJobID(job.ID) {
		return nil, fmt.Errorf("queue: admit: %w: %q", ErrBadID, job.ID)
	}
	if len(job.Payload) > l.MaxPayload {
		return nil, fmt.Errorf("queue: admit: %w: %d bytes, at most %d", ErrTooLarge, len(job.Payload), l.MaxPayload)
	}
	if len(job.Header) == 0 && job.ID == "" && job.Dedupe == "" && job.EnqueuedAt.IsZero() && job.Attempt <= 1 {
		return &nats.Msg{Subject: l.Prefix + token, Data: job.Payload}, nil
	}
	h := JobHeader(job.Header)
	// Header keys are written in their canonical form directly: Set would
	// canonicalise each one again on every admission.
	switch {
	case job.ID != "":
		h[HeaderJobID] = []string{job.ID}
		h[headerMsgID] = []string{job.ID}
	case job.Dedupe != "":
		h[headerMsgID] = []string{job.Dedupe}
	}
	if !job.EnqueuedAt.IsZero() {
		h[HeaderEnqueuedAt] = []string{job.EnqueuedAt.UTC().Format(time.RFC3339Nano)}
	}
	if job.Attempt > 1 {
		h[HeaderAttempt] = []string{strconv.Itoa(job.Attempt)}
	}
	return &nats.Msg{Subject: l.Prefix + token, Data: job.Payload, Header: h}, nil
}

// DedupeID returns the Nats-Msg-Id (Job.Dedupe) of a job submitted to
// policy for key with a producer's idempotency key: the same for every
// retry of that submission, by whichever way it comes (the shaper's
// admission, the direct lane), so that the stream's duplicate window
// stores it once. Without an idempotency key it is "".
func DedupeID(policy, key, idempotency string) string {
	if idempotency == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(policy + "\x00" + key + "\x00" + idempotency))
	return "i" + hex.EncodeToString(sum[:12])
}

// Classify maps an error of a publish into a queue's stream (an API error
// in JetStream's answer, a transport error) onto ErrFull, ErrStreamFull,
// ErrTooLarge and ErrUnavailable, as Admit does, keeping err in the chain;
// op starts its message. A nil err is nil.
func Classify(op string, err error) error { return classify(op, err) }
