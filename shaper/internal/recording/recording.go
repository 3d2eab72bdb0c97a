// Package recording lets an operator record the submissions of a policy
// from a running shaper, for `shaper record` and `shaper tune`, at no cost
// while nobody records.
//
// The protocol, on core NATS, is client's (client.NATS.Record is its other
// end):
//
//   - A recorder asks every shaper to record policy P by a request to
//     <subject>.<P> (default shaper.record.P) with a client.RecordRequest,
//     and repeats it while it records. Every shaper serving P turns its
//     recording of P on for the time asked (at most a minute) and answers
//     a client.RecordReply; one that does not serve P answers with an
//     error.
//   - While its recording of P is on, a shaper publishes the rows of the
//     trace format (package traffic), with at in seconds since the Unix
//     epoch, to <subject>.<P>.rows, in batches every 100 ms (or 64 KiB).
//     Each batch's headers say its shaper, the number of its first row,
//     its rows and the rows dropped so far (the shaper's buffer of 4 MiB
//     per policy was full), so a recorder can tell what it missed.
//
// Recording hooks into the admission gate's Config.Observe: while nobody
// records a policy, each submission costs one atomic load.
package recording

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

// Limits.
const (
	// MaxFor bounds how long one request turns a recording on.
	MaxFor = time.Minute
	// flushEvery and flushAt say when a batch is published; maxBuffer
	// bounds what waits to be.
	flushEvery = 100 * time.Millisecond
	flushAt    = 64 << 10
	maxBuffer  = 4 << 20
)

// Config holds a Recorder's settings; the zero value records nothing.
type Config struct {
	// Subject is the root of the recording subjects. Default
	// client.DefaultRecordSubject.
	Subject string
	// Instance names this shaper in batches and replies.
	Instance string
	// Policies returns the names of the policies this shaper serves,
	// sorted. Default: none (every request is refused).
	Policies func() []string
	// Logger receives failures to publish. Default: discard.
	Logger *slog.Logger
}

// Recorder records the submissions of the policies someone asked for. It
// is safe for concurrent use.
type Recorder struct {
	cfg Config

	mu       sync.Mutex
	policies map[string]*policyRecorder
	nc       *nats.Conn
	sub      *nats.Subscription
	kick     chan struct{}
}

// policyRecorder is the recording of one policy.
type policyRecorder struct {
	name  string
	until atomic.Int64 // Unix nanoseconds until which to record; 0: off

	mu      sync.Mutex
	buf     []byte
	rows    int    // in buf
	seq     uint64 // number of the first row in buf
	dropped uint64
}

// New returns a Recorder; it records nothing before Subscribe.
func New(cfg Config) *Recorder {
	if cfg.Subject == "" {
		cfg.Subject = client.DefaultRecordSubject
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Policies == nil {
		cfg.Policies = func() []string { return nil }
	}
	return &Recorder{cfg: cfg, policies: make(map[string]*policyRecorder), kick: make(chan struct{}, 1)}
}

func (r *Recorder) policy(name string) *policyRecorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.policies[name]
	if p == nil {
		p = &policyRecorder{name: name}
		r.policies[name] = p
	}
	return p
}

// Observe returns the admission gate's Config.Observe of policy: it keeps
// a row for each submission while the policy is recorded.
func (r *Recorder) Observe(policy string) func(key string, size int, at time.Time, o admission.Outcome) {
	p := r.policy(policy)
	return func(key string, size int, at time.Time, o admission.Outcome) {
		ns := at.UnixNano()
		if ns > p.until.Load() || len(key) == 0 || len(key) > traffic.MaxKeyLen {
			return
		}
		p.mu.Lock()
		if len(p.buf) >= maxBuffer {
			p.dropped++
			p.mu.Unlock()
			return
		}
		p.buf = traffic.AppendRow(p.buf, time.Duration(ns), key, size, Outcome(o))
		p.rows++
		full := len(p.buf) >= flushAt
		p.mu.Unlock()
		if full {
			select {
			case r.kick <- struct{}{}:
			default:
			}
		}
	}
}

// Outcome returns the trace's name for a gate's outcome.
func Outcome(o admission.Outcome) traffic.Outcome {
	switch o {
	case admission.Accepted:
		return traffic.Accepted
	case admission.Full:
		return traffic.Rejected
	case admission.Deferred:
		return traffic.Deferred
	case admission.Limited:
		return traffic.Limited
	case admission.Unavailable:
		return traffic.Unavailable
	default:
		return traffic.Invalid
	}
}

// Subscribe starts answering requests to record on nc.
func (r *Recorder) Subscribe(nc *nats.Conn) error {
	sub, err := nc.Subscribe(r.cfg.Subject+".*", r.handle)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.nc, r.sub = nc, sub
	r.mu.Unlock()
	return nil
}

// handle answers a request to record a policy.
func (r *Recorder) handle(m *nats.Msg) {
	name := strings.TrimPrefix(m.Subject, r.cfg.Subject+".")
	reply := client.RecordReply{Instance: r.cfg.Instance}
	var req client.RecordRequest
	served := r.cfg.Policies()
	switch {
	case json.Unmarshal(m.Data, &req) != nil || req.ForMs <= 0:
		reply.Error = `bad request: want {"for_ms": N}, N a whole number of milliseconds from 1 (longer than a minute records a minute)`
	case !slices.Contains(served, name):
		reply.Error = httpapi.UnknownPolicy(name, served)
	default:
		d := MaxFor // ForMs in ms, bounded before it is a Duration (1e15 ms overflows one)
		if req.ForMs < MaxFor.Milliseconds() {
			d = time.Duration(req.ForMs) * time.Millisecond
		}
		r.policy(name).until.Store(time.Now().Add(d).UnixNano())
		reply.Policy, reply.ForMs = name, d.Milliseconds()
	}
	b, _ := json.Marshal(reply)
	if m.Reply != "" {
		if err := m.Respond(b); err != nil {
			r.cfg.Logger.Debug("recording: reply", "err", err)
		}
	}
}

// Run publishes the recorded rows until ctx ends; then it stops answering
// requests and publishes what is left.
func (r *Recorder) Run(ctx context.Context) {
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			r.mu.Lock()
			sub := r.sub
			r.mu.Unlock()
			if sub != nil {
				_ = sub.Unsubscribe()
			}
			r.flush(time.Now())
			return
		case <-tick.C:
		case <-r.kick:
		}
		r.flush(time.Now())
	}
}

// flush publishes the rows of every policy recorded, and turns off the
// recordings nobody renewed.
func (r *Recorder) flush(now time.Time) {
	r.mu.Lock()
	nc := r.nc
	list := make([]*policyRecorder, 0, len(r.policies))
	for _, p := range r.policies {
		if p.until.Load() != 0 {
			list = append(list, p)
		}
	}
	r.mu.Unlock()
	for _, p := range list {
		p.mu.Lock()
		buf, rows, seq, dropped := p.buf, p.rows, p.seq, p.dropped
		p.buf, p.rows, p.seq = nil, 0, seq+uint64(rows)
		p.mu.Unlock()
		if rows > 0 && nc != nil {
			m := nats.NewMsg(client.RecordRows(r.cfg.Subject, p.name))
			m.Data = buf
			m.Header.Set(client.HeaderRecordInstance, r.cfg.Instance)
			m.Header.Set(client.HeaderRecordSeq, strconv.FormatUint(seq, 10))
			m.Header.Set(client.HeaderRecordRows, strconv.Itoa(rows))
			m.Header.Set(client.HeaderRecordDropped, strconv.FormatUint(dropped, 10))
			if err := nc.PublishMsg(m); err != nil {
				r.cfg.Logger.Warn("recording: publish rows", "policy", p.name, "err", err)
			}
		}
		if until := p.until.Load(); until != 0 && now.UnixNano() > until && rows == 0 {
			p.until.CompareAndSwap(until, 0)
		}
	}
}
