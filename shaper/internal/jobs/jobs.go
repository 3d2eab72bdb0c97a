// Package jobs keeps the records behind GET /v1/jobs/{id}: what happened to
// a job after it was admitted (delivered, a failed attempt, deferred,
// dead-lettered), in a JetStream key-value bucket whose entries expire.
//
// Admission writes no record: a job's id names its queue and sequence
// (queue.JobID), and while the job is stored there it is queued. A record
// appears when something happens to the job. Records are written without
// waiting for JetStream, so a record may lag or, rarely, miss a step; the
// job itself never depends on its record.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// DefaultTTL is how long a job record answers after its last change.
const DefaultTTL = 24 * time.Hour

// Bucket is the key-value bucket of the job records.
const Bucket = "SHAPER_JOBS"

// Status is where a job is.
type Status string

// The statuses a record shows.
const (
	Queued    Status = "queued"
	Deferred  Status = "deferred"
	Delivered Status = "delivered"
	Dead      Status = "dead"
)

// Record is what GET /v1/jobs/{id} shows.
type Record struct {
	ID        string    `json:"id"`
	Policy    string    `json:"policy"`
	Key       string    `json:"key"`
	Status    Status    `json:"status"`
	Deferrals int       `json:"deferrals,omitempty"`
	Attempts  int       `json:"delivery_attempts,omitempty"`
	NextTry   time.Time `json:"next_try,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	History   []string  `json:"history,omitempty"`
	Updated   time.Time `json:"updated"`
}

// Store keeps job records. Writes are plain publishes to the bucket's
// subject, without waiting for the stream's ack: they cost the delivery
// path no round trip and can never stall it, and a lost write only makes a
// record stale. A nil *Store keeps nothing. Safe for concurrent use.
type Store struct {
	nc  *nats.Conn
	kv  jetstream.KeyValue
	log *slog.Logger
}

// Open creates or binds the bucket of job records, whose entries expire
// ttl after their last change.
func Open(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int, log *slog.Logger) (*Store, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "shaper job records",
		TTL:         ttl,
		History:     1,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("job records: %w", err)
	}
	return &Store{nc: js.Conn(), kv: kv, log: log}, nil
}

// Put writes r, stamped now, without waiting.
func (s *Store) Put(r Record) {
	if s == nil {
		return
	}
	r.Updated = time.Now().UTC()
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	if err := s.nc.Publish("$KV."+Bucket+"."+r.ID, b); err != nil {
		s.log.Debug("job record", "id", r.ID, "err", err)
	}
}

// Get returns the record of job id; jetstream.ErrKeyNotFound when there is none.
func (s *Store) Get(ctx context.Context, id string) (*Record, error) {
	e, err := s.kv.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Finder returns the policy and queue whose stream made job id, and the
// job's sequence there; ok false for an id no queue made.
type Finder func(id string) (policy string, q *queue.Queue, seq uint64, ok bool)

// Waiting says why the queued jobs of policy wait beyond their turn ("":
// they do not), as the reason of their status.
type Waiting func(policy string) string

// Handler serves GET /v1/jobs/{id}.
func (s *Store) Handler(find Finder, waiting Waiting) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		rec, err := s.find(r.Context(), id, find)
		if err == nil && rec.Status == Queued && rec.Reason == "" {
			rec.Reason = waiting(rec.Policy)
		}
		switch {
		case err == nil:
			httpapi.WriteJSON(w, http.StatusOK, rec)
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
			httpapi.Error(w, http.StatusNotFound, "no job "+httpapi.Quote(id)+" (unknown, or its record expired)")
		default:
			httpapi.Unavailable(w, "job records", err)
		}
	}
}

// find returns what is known of job id. A job admitted straight into its
// queue has no record until something happens to it: its id names its
// queue and sequence, and while it is stored there it is queued. The
// record is read again after a miss in the queue, since a delivered job's
// record is written just before the job is removed.
func (s *Store) find(ctx context.Context, id string, find Finder) (*Record, error) {
	if !queue.ValidJobID(id) {
		return nil, jetstream.ErrInvalidKey // never used in a subject
	}
	rec, err := s.Get(ctx, id)
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, err
	}
	policy, q, seq, ok := find(id)
	if !ok {
		return nil, err
	}
	m, err := q.Lookup(ctx, seq)
	switch {
	case err == nil:
		return &Record{ID: id, Policy: policy, Key: m.Key, Status: Queued, Updated: m.EnqueuedAt.UTC()}, nil
	case errors.Is(err, queue.ErrEmpty):
		return s.Get(ctx, id)
	default:
		return nil, err
	}
}
