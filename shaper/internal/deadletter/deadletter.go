// Package deadletter keeps the jobs the shaper gave up on: one stream per
// policy, SHAPER_DEAD_<policy> on shaper.dead.<policy>.<key token>, each
// job with its payload, its headers, the reason and its history; and the
// routes that list, show, replay and purge them.
package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

const (
	subjectRoot  = "shaper.dead"
	streamPrefix = "SHAPER_DEAD_"
)

// Headers a dead letter carries beside the job's own.
const (
	HeaderReason  = "Shaper-Dead-Reason"
	HeaderAt      = "Shaper-Dead-At"
	HeaderHistory = "Shaper-Dead-History" // JSON array of strings
	HeaderFrom    = "Shaper-Dead-From"    // a From
)

// From says which drainer gave up on a job.
type From string

const (
	// FromQueue: the job's deliveries failed (the policy's queue).
	FromQueue From = "queue"
	// FromDeferred: the deferred job was never re-admitted.
	FromDeferred From = "deferred"
)

// Stream returns the name of the dead-letter stream of policy.
func Stream(policy string) string { return streamPrefix + policy }

func subject(policy, token string) string { return subjectRoot + "." + policy + "." + token }

// Config holds what a Store needs besides JetStream. Policies and Replay
// are required.
type Config struct {
	Replicas   int // replicas of the streams it creates
	MaxPayload int // the largest job payload, in bytes
	Logger     *slog.Logger
	// Jobs receives a record of every job dead-lettered or replayed (its
	// new id); may be nil.
	Jobs *jobs.Store
	// Policies returns the names of every policy, in order.
	Policies func() []string
	// Replay submits a dead letter's job again through the normal admission
	// path, in the trace of the job (the trace context of header, the dead
	// letter's), naming the dead job replayOf (queue.HeaderReplayOf), and
	// returns its new id, and whether the job was kept (accepted, or
	// deferred).
	Replay func(ctx context.Context, policy, key string, payload []byte, header nats.Header, replayOf string) (id string, kept bool, why string)
	// Tracer, when set, records a span of every dead-lettering in the job's
	// trace. Default: none.
	Tracer trace.Tracer
}

// Store is the dead letters of every policy. Safe for concurrent use.
type Store struct {
	js  jetstream.JetStream
	cfg Config
	log *slog.Logger

	// counts holds, per policy, its dead letters as last read from the
	// stream and counted since (a *atomic.Uint64): Count costs no request.
	counts sync.Map
}

// New returns the Store of dead letters on js.
func New(js jetstream.JetStream, cfg Config) *Store {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{js: js, cfg: cfg, log: cfg.Logger}
}

// Open creates or updates the dead-letter stream of policy.
func (s *Store) Open(ctx context.Context, policy string) error {
	cfg := jetstream.StreamConfig{
		Name:        Stream(policy),
		Description: "shaper dead letters of policy " + policy,
		Subjects:    []string{subjectRoot + "." + policy + ".*"},
		Retention:   jetstream.LimitsPolicy,
		Replicas:    s.cfg.Replicas,
		Duplicates:  2 * time.Minute,
		MaxMsgSize:  int32(max(s.cfg.MaxPayload, queue.DefaultMaxPayload) + 128*1024),
	}
	// Create first: creating is idempotent, while an update racing another
	// shaper's creation of the same new stream can go unanswered.
	stream, err := s.js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		stream, err = s.js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("dead-letter stream: %w", err)
	}
	s.count(policy).Store(stream.CachedInfo().State.Msgs)
	return nil
}

// Func returns the drain.Config.DeadLetter of a drainer of policy's jobs
// (from says which): it stores the job with its reason and history.
func (s *Store) Func(policy string, from From) func(context.Context, *queue.Msg, string, []string) error {
	return func(ctx context.Context, m *queue.Msg, reason string, history []string) (err error) {
		if s.cfg.Tracer != nil {
			var span trace.Span
			ctx, span = s.cfg.Tracer.Start(jobtrace.Extract(ctx, m.Header), "shaper.dead_letter "+policy,
				trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
					attribute.String("shaper.policy", policy), attribute.String("shaper.key", m.Key),
					attribute.String("shaper.job.id", m.ID), attribute.String("shaper.dead.reason", reason),
					attribute.String("shaper.dead.from", string(from)), attribute.Int("shaper.attempts", m.Attempt-1)))
			defer func() { jobtrace.End(span, err) }()
		}
		h := m.Headers(policy)
		hist, _ := json.Marshal(history)
		h.Set(HeaderReason, reason)
		h.Set(HeaderAt, time.Now().UTC().Format(time.RFC3339Nano))
		h.Set(HeaderHistory, string(hist))
		h.Set(HeaderFrom, string(from))
		h.Set(queue.HeaderAttempt, strconv.Itoa(m.Attempt-1)) // attempts made
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msg := &nats.Msg{Subject: subject(policy, m.Token), Data: m.Payload, Header: h}
		// The id dedupes a dead-lettering repeated after a crash.
		ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID+"/dead/"+strconv.FormatUint(m.Seq, 10)+"/"+string(from)))
		if err != nil {
			return fmt.Errorf("dead-letter %s: %w", m.ID, err)
		}
		if !ack.Duplicate {
			s.count(policy).Add(1)
		}
		rec := jobs.Record{ID: m.ID, Policy: policy, Key: m.Key, Status: jobs.Dead, Reason: reason, History: history, LastError: lastError(history)}
		if from == FromDeferred {
			rec.Deferrals = m.Attempt - 1
		} else {
			rec.Attempts = m.Attempt - 1
		}
		// The record must be kept before the job leaves its queue: a job
		// gone without one reads as delivered.
		if err := s.cfg.Jobs.Write(ctx, rec); err != nil {
			return fmt.Errorf("dead-letter %s: %w", m.ID, err)
		}
		s.log.Warn("job dead-lettered", "policy", policy, "key", m.Key, "job", m.ID, "reason", reason)
		return nil
	}
}

// refreshWorkers bounds the stream info requests of one Refresh in flight.
const refreshWorkers = 8

func (s *Store) count(policy string) *atomic.Uint64 {
	c, ok := s.counts.Load(policy)
	if !ok {
		c, _ = s.counts.LoadOrStore(policy, new(atomic.Uint64))
	}
	return c.(*atomic.Uint64)
}

// Count returns how many dead letters policy has, from memory: as last
// read from its stream (Open, Refresh) plus those dead-lettered here since.
func (s *Store) Count(policy string) uint64 { return s.count(policy).Load() }

// Refresh reads the dead-letter count of each of policies (every policy
// when none is given) from JetStream, refreshWorkers requests at a time.
// A count it cannot read keeps its last value.
func (s *Store) Refresh(ctx context.Context, policies ...string) {
	if len(policies) == 0 {
		policies = s.cfg.Policies()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sem := make(chan struct{}, refreshWorkers)
	var wg sync.WaitGroup
	for _, policy := range policies {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			stream, err := s.js.Stream(ctx, Stream(policy))
			if err != nil {
				s.log.Debug("dead-letter count not refreshed", "policy", policy, "err", err)
				return
			}
			s.count(policy).Store(stream.CachedInfo().State.Msgs)
		})
	}
	wg.Wait()
}

// KeepCounts refreshes the counts every interval until ctx ends: dead
// letters made, replayed or purged by other shapers.
func (s *Store) KeepCounts(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.Refresh(ctx)
		}
	}
}

// lastError returns the error of the last failed attempt in a dead job's
// history ("<time> attempt 3: <error>", as drain.Drainer.failed writes its
// lines), "" when it has none (a job dead before any attempt: undecodable,
// or past its deadline).
func lastError(history []string) string {
	for i := len(history) - 1; i >= 0; i-- {
		line := history[i]
		at := strings.Index(line, " attempt ")
		if at < 0 {
			continue
		}
		if colon := strings.Index(line[at:], ": "); colon >= 0 {
			return line[at+colon+2:]
		}
	}
	return ""
}
