// Package listing pages through the messages the shaper keeps per policy
// in a stream of its own (dead letters, deferred jobs), for the listing
// routes. A page is read from one sequence on by a consumer made for it,
// in bounded batches, headers only, and the consumer is deleted after: a
// page costs what it holds, however many messages the streams keep. Where
// the next page starts is an opaque cursor, the policy and the sequence
// read last.
package listing

import (
	"context"
	"encoding/base64"
	"errors"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

const (
	// DefaultLimit is how many items a page holds when the request does
	// not say.
	DefaultLimit = 100
	// MaxLimit is the most items a page may hold.
	MaxLimit = 1000
	// scanFactor bounds the messages one page reads to scanFactor times its
	// limit, when a filter that no subject expresses skips some: past it
	// the page ends short, with a cursor to go on from.
	scanFactor = 10
	// batch bounds the messages one fetch asks for.
	batch = 256
	// idle is how long the server keeps a page's consumer when the shaper
	// could not delete it.
	idle = time.Minute
)

// Cursor is where a listing goes on: after sequence Seq of the stream of
// policy Policy (Seq 0: from its first message).
type Cursor struct {
	Policy string
	Seq    uint64
}

// String returns the cursor as the API hands it out: opaque, URL-safe.
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.Policy + ":" + strconv.FormatUint(c.Seq, 10)))
}

// ParseCursor reads a cursor String made.
func ParseCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, errBadCursor
	}
	i := strings.LastIndexByte(string(b), ':')
	if i <= 0 {
		return Cursor{}, errBadCursor
	}
	seq, err := strconv.ParseUint(string(b[i+1:]), 10, 64)
	if err != nil || seq == math.MaxUint64 {
		// The last sequence is none a stream reaches: the page would
		// start after it, at 0, which JetStream refuses (a forged cursor
		// was answered 503 with its error, to be retried for ever).
		return Cursor{}, errBadCursor
	}
	return Cursor{Policy: string(b[:i]), Seq: seq}, nil
}

var errBadCursor = errors.New("not a cursor")

// Request is what a listing request asks for beside its filters.
type Request struct {
	Limit int
	After Cursor
}

// Parse reads limit and after from q, and on a bad one returns what is
// wrong with it, for a 400.
func Parse(q url.Values) (Request, string) {
	r := Request{Limit: DefaultLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return r, "limit " + httpapi.Quote(v) + ": want a number from 1 to " + strconv.Itoa(MaxLimit) + " (default " + strconv.Itoa(DefaultLimit) + ")"
		}
		r.Limit = n
	}
	if v := q.Get("after"); v != "" {
		c, err := ParseCursor(v)
		if err != nil {
			return r, "after " + httpapi.Quote(v) + ": not a cursor of this listing (pass the next of the page before, as it came)"
		}
		r.After = c
	}
	return r, ""
}

// Streams says where the listing's messages are: Name is the stream of a
// policy, Subject the subject its messages are read on ("" for all of the
// stream's).
type Streams struct {
	JS      jetstream.JetStream
	Name    func(policy string) string
	Subject func(policy string) string
}

// Keep is handed each message a page reads, with the policy of its
// stream, and says whether it goes in the page.
type Keep func(policy string, m jetstream.Msg, md *jetstream.MsgMetadata) bool

// Page reads a page of the messages of policies' streams, in order of
// policy name and then of sequence, from req.After on, handing each to
// keep until keep has taken req.Limit of them or the page has read
// scanFactor times that many. It returns the cursor of the next page, nil
// when there is nothing after this one. A policy whose stream is missing
// has nothing to list.
func (s Streams) Page(ctx context.Context, policies []string, req Request, keep Keep) (*Cursor, error) {
	policies = slices.Sorted(slices.Values(policies))
	i, found := slices.BinarySearch(policies, req.After.Policy)
	start := uint64(1)
	if found {
		start = req.After.Seq + 1
	}
	p := page{keep: keep, limit: req.Limit, budget: scanFactor * req.Limit}
	for ; i < len(policies); i, start = i+1, 1 {
		name := policies[i]
		if p.done() {
			// The page is full: the next one starts with the first policy
			// that has anything to list.
			has, err := s.holds(ctx, name)
			if err != nil {
				return nil, err
			}
			if has {
				return &Cursor{Policy: name}, nil
			}
			continue
		}
		last, more, err := s.read(ctx, name, start, &p)
		if err != nil {
			return nil, err
		}
		if more {
			return &Cursor{Policy: name, Seq: last}, nil
		}
	}
	return nil, nil
}

// page counts what a page has taken and read.
type page struct {
	keep          Keep
	limit, budget int
	kept, read    int
}

func (p *page) done() bool { return p.kept >= p.limit || p.read >= p.budget }

// read reads policy's messages from sequence start on into p until p is
// done, and returns the sequence it read last and whether any message of
// the stream comes after it.
func (s Streams) read(ctx context.Context, policy string, start uint64, p *page) (last uint64, more bool, err error) {
	stream, err := s.JS.Stream(ctx, s.Name(policy))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, err
	}
	if st := stream.CachedInfo().State; st.Msgs == 0 || st.LastSeq < start {
		return 0, false, nil
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		AckPolicy:         jetstream.AckNonePolicy,
		FilterSubject:     s.subject(policy),
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: idle,
	})
	if err != nil {
		return 0, false, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	pending := cons.CachedInfo().NumPending // messages left to read
	for {
		// Without a filter beyond the subject every message read is kept:
		// ask for no more than the page has room for.
		msgs, err := cons.FetchNoWait(min(batch, p.limit-p.kept, p.budget-p.read))
		if err != nil {
			return 0, false, err
		}
		got := 0
		for m := range msgs.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return 0, false, err
			}
			got++
			p.read++
			last, pending = md.Sequence.Stream, md.NumPending
			if p.keep(policy, m, md) {
				p.kept++
			}
			if p.done() {
				break
			}
		}
		if err := msgs.Error(); err != nil {
			return 0, false, err
		}
		switch {
		case got == 0 && pending > 0:
			return 0, false, errNoAnswer
		case got == 0 || pending == 0:
			return last, false, nil
		case p.done():
			return last, true, nil
		}
	}
}

// errNoAnswer: a fetch came back empty with messages left to read.
var errNoAnswer = errors.New("listing: the stream handed over no messages while it holds more")

// holds reports whether policy's stream holds a message on its subject.
func (s Streams) holds(ctx context.Context, policy string) (bool, error) {
	stream, err := s.JS.Stream(ctx, s.Name(policy))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if stream.CachedInfo().State.Msgs == 0 {
		return false, nil
	}
	subject := s.subject(policy)
	if subject == "" {
		return true, nil
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return false, err
	}
	return len(info.State.Subjects) > 0, nil
}

func (s Streams) subject(policy string) string {
	if s.Subject == nil {
		return ""
	}
	return s.Subject(policy)
}

// Size returns the size of the payload of a message read headers only.
func Size(m jetstream.Msg) int {
	n, _ := strconv.Atoi(m.Headers().Get(nats.MsgSize))
	return n
}
