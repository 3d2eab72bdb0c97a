// Package deadletter keeps the jobs the shaper gave up on: one stream per
// policy, SHAPER_DEAD_<policy> on shaper.dead.<policy>.<key token>, each
// job with its payload, its headers, the reason and its history; and the
// routes that list, show, replay and purge them.
package deadletter

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
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
	// Jobs receives a record of every job dead-lettered or replayed; may be nil.
	Jobs *jobs.Store
	// Policies returns the names of every policy, in order.
	Policies func() []string
	// Replay submits a dead letter's job again through the normal admission
	// path and returns its new id, and whether the job was kept (accepted,
	// or deferred).
	Replay func(ctx context.Context, policy, key string, payload []byte) (id string, kept bool)
}

// Store is the dead letters of every policy. Safe for concurrent use.
type Store struct {
	js  jetstream.JetStream
	cfg Config
	log *slog.Logger
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
	_, err := s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        Stream(policy),
		Description: "shaper dead letters of policy " + policy,
		Subjects:    []string{subjectRoot + "." + policy + ".*"},
		Retention:   jetstream.LimitsPolicy,
		Replicas:    s.cfg.Replicas,
		Duplicates:  2 * time.Minute,
		MaxMsgSize:  int32(max(s.cfg.MaxPayload, queue.DefaultMaxPayload) + 128*1024),
	})
	if err != nil {
		return fmt.Errorf("dead-letter stream: %w", err)
	}
	return nil
}

// Func returns the drain.Config.DeadLetter of a drainer of policy's jobs
// (from says which): it stores the job with its reason and history.
func (s *Store) Func(policy string, from From) func(context.Context, *queue.Msg, string, []string) error {
	return func(ctx context.Context, m *queue.Msg, reason string, history []string) error {
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
		if _, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID+"/dead/"+strconv.FormatUint(m.Seq, 10)+"/"+string(from))); err != nil {
			return fmt.Errorf("dead-letter %s: %w", m.ID, err)
		}
		rec := jobs.Record{ID: m.ID, Policy: policy, Key: m.Key, Status: jobs.Dead, Reason: reason, History: history}
		if from == FromDeferred {
			rec.Deferrals = m.Attempt - 1
		} else {
			rec.Attempts = m.Attempt - 1
		}
		s.cfg.Jobs.Put(rec)
		s.log.Warn("job dead-lettered", "policy", policy, "key", m.Key, "job", m.ID, "reason", reason)
		return nil
	}
}

// Count returns how many dead letters policy has (0 when it cannot tell).
func (s *Store) Count(ctx context.Context, policy string) uint64 {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	stream, err := s.js.Stream(ctx, Stream(policy))
	if err != nil {
		return 0
	}
	return stream.CachedInfo().State.Msgs
}
