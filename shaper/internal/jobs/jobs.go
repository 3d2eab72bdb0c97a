// Package jobs answers GET /v1/jobs/{id}: where a job is, from as little
// kept state as possible.
//
// Most of a job's status is derived, not stored. A job's id names its
// queue's stream and its sequence there (queue.JobID): while the job is
// stored there it is queued, and once it is gone it was delivered, unless a
// record says otherwise. Records are kept only for what cannot be derived:
// a deferred job (its id is its own), a failed delivery attempt, a dead
// letter, a dead letter replayed (which names its new job), and the
// delivery of a job that had a record before. Memory
// therefore does not grow with the jobs delivered, however long a shaper
// runs.
//
// The records live in one stream, SHAPER_JOBS, one subject per job
// (shaper.jobs.<id>, the latest record only), bounded by age (Config.TTL
// after a record's last change) and by count (Config.MaxRecords, the
// oldest going first). A derived "delivered" is only sound while every
// record written since the job was admitted is still kept: horizon marks
// (horizon.go) say up to which sequence of a queue that holds, and a job
// past the horizon is answered 404, never a guess.
//
// Records are written without waiting for JetStream (Put), except a dead
// letter's (Write), which must be kept before its job leaves the queue, and
// a replay's, which every shaper must answer as soon as the replay is done.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// Defaults for the zero Config.
const (
	// DefaultTTL is how long a record is kept after its last change, and
	// so the longest a delivered job's status can be asked for.
	DefaultTTL = 24 * time.Hour
	// DefaultMaxRecords bounds the records kept; past it the oldest go.
	DefaultMaxRecords = 100_000
)

// Stream is the stream of the job records.
const Stream = "SHAPER_JOBS"

const subjectRoot = "shaper.jobs."

// Status is where a job is.
type Status string

// The statuses a record shows.
const (
	Queued    Status = "queued"
	Deferred  Status = "deferred"
	Delivered Status = "delivered"
	Dead      Status = "dead"
	// Replayed is a dead letter submitted again (POST /v1/dead/replay): as
	// a new job, named by the record's ReplayedAs.
	Replayed Status = "replayed"
	// Duplicate is a deferred job that was, at re-admission, found in the
	// queue's duplicate window: a retry of a submission that had been
	// stored, not deferred, kept while other deferred jobs of its key
	// waited. It is the job named by the record's DuplicateOf.
	Duplicate Status = "duplicate"
)

// Record is what GET /v1/jobs/{id} shows. A delivered job whose status is
// derived has no key and no time: neither is kept.
type Record struct {
	ID        string `json:"id"`
	Policy    string `json:"policy"`
	Key       string `json:"key,omitempty"`
	Status    Status `json:"status"`
	Deferrals int    `json:"deferrals,omitempty"`
	Attempts  int    `json:"delivery_attempts,omitempty"`
	// Pauses counts, of the attempts, those the downstream answered by
	// asking for a pause (not counted toward retry.attempts); Paused says
	// the last one did: the key waits until NextTry.
	Pauses  int       `json:"pauses,omitempty"`
	Paused  bool      `json:"paused,omitempty"`
	NextTry time.Time `json:"next_try,omitzero"`
	// DeliveringSince, of a queued job, is when its delivery started: it
	// awaits the consumer's answer (or the webhook's), attempt
	// DeliveringAttempt (0: not known). Never stored: asked of the drain.
	DeliveringSince   time.Time `json:"delivering_since,omitzero"`
	DeliveringAttempt int       `json:"delivering_attempt,omitempty"`
	Reason            string    `json:"reason,omitempty"`
	LastError         string    `json:"last_error,omitempty"`
	// ReplayedAs is the id of the new job a replayed dead letter became.
	ReplayedAs string `json:"replayed_as,omitempty"`
	// DuplicateOf is the id of the job a Duplicate is.
	DuplicateOf string    `json:"duplicate_of,omitempty"`
	History     []string  `json:"history,omitempty"`
	Updated     time.Time `json:"updated,omitzero"`
}

// derivable reports whether r says only what the job's queue says without
// it: the first delivery of a job named after its place in the queue.
func (r *Record) derivable() bool {
	_, _, named := queue.ParseJobID(r.ID)
	return named && r.Status == Delivered && r.Attempts <= 1 && r.Deferrals == 0
}

// Config holds a Store's settings; the zero value means the defaults.
type Config struct {
	TTL        time.Duration // default DefaultTTL
	MaxRecords int64         // default DefaultMaxRecords
	Replicas   int           // replicas of the stream, default 1
	Logger     *slog.Logger
}

// Store keeps job records. A nil *Store keeps nothing. Safe for concurrent
// use.
type Store struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	log    *slog.Logger
	put    atomic.Int64 // when Put last published a record (Unix nanoseconds)
}

// Open creates or updates the stream of job records.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.MaxRecords <= 0 {
		cfg.MaxRecords = DefaultMaxRecords
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfgs := jetstream.StreamConfig{
		Name:              Stream,
		Description:       "shaper job records: what cannot be derived from the queues",
		Subjects:          []string{subjectRoot + ">"},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgsPerSubject: 1,
		MaxMsgs:           cfg.MaxRecords,
		MaxAge:            cfg.TTL,
		Replicas:          max(cfg.Replicas, 1),
		Duplicates:        min(cfg.TTL, 2*time.Minute),
		AllowDirect:       false, // a lagging replica could miss a dead letter's record
	}
	// Create first: creating is idempotent, while an update racing another
	// shaper's creation of the same new stream can go unanswered.
	st, err := js.CreateStream(ctx, cfgs)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		st, err = js.UpdateStream(ctx, cfgs)
	}
	if err != nil {
		return nil, fmt.Errorf("job records: %w", err)
	}
	return &Store{cfg: cfg, nc: js.Conn(), js: js, stream: st, log: cfg.Logger}, nil
}

func recordSubject(id string) string { return subjectRoot + id }

// Put keeps r, stamped now, without waiting for JetStream: it costs the
// delivery path no round trip and can never stall it; a lost write only
// makes a record stale. A record that says only what can be derived (the
// first delivery of a job named after its place) is not kept.
func (s *Store) Put(r Record) {
	if s == nil || r.derivable() || !queue.ValidJobID(r.ID) {
		return
	}
	r.Updated = time.Now().UTC()
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	s.put.Store(time.Now().UnixNano())
	if err := s.nc.Publish(recordSubject(r.ID), b); err != nil {
		s.log.Debug("job record", "id", r.ID, "err", err)
	}
}

// recordSettle is how long after a Put a record not found is looked for
// again (once, a twentieth of it later): the store is a moment behind.
const recordSettle = 100 * time.Millisecond

// Write keeps r, stamped now, and returns once JetStream has stored it.
func (s *Store) Write(ctx context.Context, r Record) error {
	if s == nil || r.derivable() {
		return nil
	}
	if !queue.ValidJobID(r.ID) {
		return fmt.Errorf("job record: bad id %q", r.ID)
	}
	r.Updated = time.Now().UTC()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.js.Publish(ctx, recordSubject(r.ID), b); err != nil {
		return fmt.Errorf("job record %s: %w", r.ID, err)
	}
	return nil
}

// ErrNotFound is returned for a job nothing is known of: never made, or
// past the horizon.
var ErrNotFound = errors.New("no such job")

// Get returns the record of job id; ErrNotFound when there is none.
func (s *Store) Get(ctx context.Context, id string) (*Record, error) { return s.read(ctx, id, true) }

// Peek returns the record of job id, or nil when there is none (or it
// cannot be read), without waiting for one this shaper put a moment ago
// (Get does): what an admission asks of a resubmission found in a
// duplicate window, to answer with the id of a deferred job re-admitted
// since (whose record is older than its re-admission).
func (s *Store) Peek(ctx context.Context, id string) *Record {
	r, _ := s.read(ctx, id, false)
	return r
}

// read is Get; with settle, a record not found while this shaper put one
// a moment ago is looked for again.
func (s *Store) read(ctx context.Context, id string, settle bool) (*Record, error) {
	if !queue.ValidJobID(id) {
		return nil, ErrNotFound // never used in a subject
	}
	m, err := s.stream.GetLastMsgForSubject(ctx, recordSubject(id))
	if settle && errors.Is(err, jetstream.ErrMsgNotFound) && time.Since(time.Unix(0, s.put.Load())) < recordSettle {
		// Put does not wait for JetStream: a record this shaper put a
		// moment ago (a deferred job's, answered 429 with its id just
		// before) may not be stored yet. Once what it published has
		// reached the server, and the stream has had a moment, look again.
		if s.nc.FlushTimeout(recordSettle) == nil {
			select {
			case <-time.After(recordSettle / 20):
			case <-ctx.Done():
			}
			m, err = s.stream.GetLastMsgForSubject(ctx, recordSubject(id))
		}
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("job record %s: %w", id, err)
	}
	return &r, nil
}

// FromDelivery returns the record a delivery event of the main drainer of
// policy leaves, and false when it leaves none: a delivered job is derived
// from its queue unless it had a record before (its failed attempts), so
// it is recorded delivered; a failed attempt is recorded queued, with its
// attempts, its next try and its error; a pause without an attempt (no
// consumer online) and a dead-lettering (the dead letters record it)
// leave none.
func FromDelivery(policy string, e drain.Event) (Record, bool) {
	switch {
	case !e.Attempted:
		return Record{}, false
	case e.Err == nil:
		return Record{ID: e.ID, Policy: policy, Key: e.Key, Status: Delivered, Attempts: e.Attempt}, true
	default:
		return Record{ID: e.ID, Policy: policy, Key: e.Key, Status: Queued, Attempts: e.Attempt - 1, Pauses: max(e.Attempt-1-e.Failures, 0), Paused: e.Paused,
			NextTry: e.RetryAt, LastError: e.Err.Error(), History: e.History}, true
	}
}

// Resumed is what a queued record of a failed job says of its attempts to
// the drainer that takes the job on (drain.Config.Resume). A record
// written before pauses were kept apart counts every attempt as failed.
func (r *Record) Resumed() drain.Resumed {
	return drain.Resumed{Attempts: r.Attempts, Failures: max(r.Attempts-r.Pauses, 0), History: r.History, RetryAt: r.NextTry, Paused: r.Paused}
}

// FromReadmission returns the record an event of the drainer re-admitting
// policy's deferred jobs leaves, and false when it leaves none: a failed
// re-admission is recorded deferred, with its deferrals, next try and
// error; waiting for room is no failure, and a job put back in its queue
// is recorded by the gate (admission.Config.OnReadmit).
func FromReadmission(policy string, e drain.Event) (Record, bool) {
	if e.Err == nil || !e.Attempted {
		return Record{}, false
	}
	return Record{ID: e.ID, Policy: policy, Key: e.Key, Status: Deferred, Deferrals: e.Attempt - 1, NextTry: e.RetryAt, LastError: e.Err.Error()}, true
}
