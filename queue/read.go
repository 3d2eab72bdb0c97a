package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Msg is a job read back from the queue, with every field of its Job
// filled in (ID, Key, EnqueuedAt and Attempt derived when not stored).
type Msg struct {
	Seq   uint64 // stream sequence; pass it to Remove
	Token string // the key's subject token
	// Undecodable, when set, says why the message is not a job Admit can
	// have stored, so that nobody can tell what to deliver: its subject's
	// token is no key's encoding (Key is then ""), its Shaper-Key header
	// names another key than its subject's, or its Shaper-Job-Id header is
	// no job id (ID is then the id of its place, JobID). A drainer
	// dead-letters such a job instead of delivering it. A bad
	// Shaper-Enqueued-At or Shaper-Attempt is not undecodable: the stream's
	// timestamp and the first attempt stand in for them.
	Undecodable string
	Job
}

// Headers returns the headers the job travels with once it leaves the
// queue (to a delivery, a dead letter): its own non-NATS headers plus
// Shaper-Job-Id, Shaper-Policy, Shaper-Key, Shaper-Enqueued-At and
// Shaper-Attempt for policy.
func (m *Msg) Headers(policy string) nats.Header {
	h := JobHeader(m.Header)
	h[HeaderJobID] = []string{m.ID}
	h[HeaderPolicy] = []string{policy}
	h[HeaderKey] = []string{m.Key}
	h[HeaderEnqueuedAt] = []string{m.EnqueuedAt.UTC().Format(time.RFC3339Nano)}
	h[HeaderAttempt] = []string{strconv.Itoa(m.Attempt)}
	return h
}

// Next returns the first job of key token with a sequence at or after from,
// or an error wrapping ErrEmpty when there is none. Jobs of one key come back
// in the order they were admitted.
func (q *Queue) Next(ctx context.Context, token string, from uint64) (*Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	raw, err := q.stream.GetMsg(ctx, max(from, 1), jetstream.WithGetMsgSubject(q.prefix+token))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, ErrEmpty
		}
		return nil, classify("queue: next", err)
	}
	return q.decode(raw.Sequence, token, raw.Header, raw.Data, raw.Time), nil
}

// Get returns the job stored at seq, which must be a job of key token; an
// error wrapping ErrEmpty when it is gone. Unlike Next it is one index
// lookup, however many other keys' jobs are stored after it.
func (q *Queue) Get(ctx context.Context, token string, seq uint64) (*Msg, error) {
	m, err := q.Lookup(ctx, seq)
	if err != nil {
		return nil, err
	}
	if m.Token != token {
		return nil, fmt.Errorf("queue: get %d: %w: it belongs to %s, not %s", seq, ErrEmpty, q.Subject(m.Token), q.Subject(token))
	}
	return m, nil
}

// LastSeq returns the sequence of the last job the stream stored, as its
// leader sees it now.
func (q *Queue) LastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	info, err := q.stream.Info(ctx)
	if err != nil {
		return 0, classify("queue: last sequence", err)
	}
	q.setEpoch(info.Created)
	return info.State.LastSeq, nil
}

// Stored returns how many jobs the stream holds now, over all keys.
func (q *Queue) Stored(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	info, err := q.stream.Info(ctx)
	if err != nil {
		return 0, classify("queue: stored", err)
	}
	return info.State.Msgs, nil
}

// Lookup returns the job stored at seq, whatever its key; an error wrapping
// ErrEmpty when there is none.
func (q *Queue) Lookup(ctx context.Context, seq uint64) (*Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	raw, err := q.stream.GetMsg(ctx, seq)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, ErrEmpty
		}
		return nil, classify("queue: lookup", err)
	}
	token := q.Token(raw.Subject)
	if token == "" {
		return nil, fmt.Errorf("queue: lookup %d: %w: %s is not a key's subject", seq, ErrEmpty, raw.Subject)
	}
	return q.decode(raw.Sequence, token, raw.Header, raw.Data, raw.Time), nil
}

// decode makes the Msg of the job stored at seq for key token, from its
// headers h, its payload data and the time the stream stored it.
//
// The Msg keeps only what it needs of the message read: a drainer holds
// one read ahead for every key with a job waiting, so a message's whole
// buffer (its headers' bytes too) and its parsed header, mostly JetStream's
// own Nats-* entries, would cost every active key about a kilobyte. The
// payload is copied to its own size and Header keeps the job's own
// headers only (nil when it has none): JobHeader drops the others anyway.
func (q *Queue) decode(seq uint64, token string, h nats.Header, data []byte, stored time.Time) *Msg {
	m := &Msg{Seq: seq, Token: token, Job: Job{Payload: bytes.Clone(data), Header: extraHeader(h)}}
	var bad []string
	m.ID = h.Get(HeaderJobID)
	if m.ID != "" && !ValidJobID(m.ID) {
		bad = append(bad, fmt.Sprintf("its %s header %q is not a job id", HeaderJobID, clip(m.ID)))
		m.ID = ""
	}
	if m.ID == "" {
		m.ID = q.JobID(seq)
	}
	key, err := DecodeKey(token)
	switch named := h.Get(HeaderKey); {
	case err != nil:
		bad = append(bad, fmt.Sprintf("subject token %q is not a key's encoding (%v)", token, err))
	case named != "" && named != key && named != HeaderForm(key):
		bad = append(bad, fmt.Sprintf("its %s header %q is not the key of its subject token %q", HeaderKey, clip(named), token))
		m.Key = key
	default:
		m.Key = key
	}
	m.Undecodable = strings.Join(bad, "; ")
	// What a producer may get wrong without harm is tolerated: a bad
	// enqueue time is the stream's, a bad attempt the first.
	if t, err := time.Parse(time.RFC3339Nano, h.Get(HeaderEnqueuedAt)); err == nil {
		m.EnqueuedAt = t
	} else {
		m.EnqueuedAt = stored
	}
	m.Attempt, _ = strconv.Atoi(h.Get(HeaderAttempt))
	if m.Attempt <= 0 {
		m.Attempt = 1
	}
	return m
}

// HeaderForm is key as a NATS header carries it: CR and LF turned into
// spaces, white space at either end trimmed. A consumer given a
// Shaper-Key header of that form reads the exact key from the subject's
// last token (DecodeKey).
func HeaderForm(key string) string {
	return strings.TrimSpace(strings.NewReplacer("\r", " ", "\n", " ").Replace(key))
}

// clip shortens a header value quoted in Msg.Undecodable.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// Depths returns the number of jobs stored per key, read from the stream
// (exact, but one JetStream request over every subject: not for a hot path).
func (q *Queue) Depths(ctx context.Context) (map[string]uint64, error) {
	byToken, _, err := q.TokenDepths(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(byToken))
	for t, n := range byToken {
		if k, err := DecodeKey(t); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// TokenDepths is Depths keyed by key token, and the sequence the count
// reaches: every job stored up to upTo (the stream's last sequence when it
// counted) is in it, or was removed. A job stored while the server counts
// may be in it too, with a sequence above upTo: the server reads its last
// sequence just before it counts the subjects.
func (q *Queue) TokenDepths(ctx context.Context) (depths map[string]uint64, upTo uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	info, err := q.stream.Info(ctx, jetstream.WithSubjectFilter(q.prefix+"*"))
	if err != nil {
		return nil, 0, classify("queue: depths", err)
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if t := q.Token(subj); t != "" {
			out[t] = n
		}
	}
	return out, info.State.LastSeq, nil
}

// extraHeader returns the job's own headers of h, all but NATS's
// (Nats-*); nil when none is left.
func extraHeader(h nats.Header) nats.Header {
	n := 0
	for k := range h {
		if !strings.HasPrefix(k, "Nats-") {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make(nats.Header, n)
	for k, v := range h {
		if !strings.HasPrefix(k, "Nats-") {
			out[k] = v
		}
	}
	return out
}
