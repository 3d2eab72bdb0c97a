package shaper

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
)

// DefaultJobTTL is how long a job record answers GET /v1/jobs/{id} after its
// last change.
const DefaultJobTTL = 24 * time.Hour

// Job statuses beyond the submission ones.
const (
	statusDelivered = "delivered"
	statusDead      = "dead"
)

// jobRecord is what GET /v1/jobs/{id} shows.
type jobRecord struct {
	ID        string    `json:"id"`
	Policy    string    `json:"policy"`
	Key       string    `json:"key"`
	Status    string    `json:"status"` // queued | deferred | delivered | dead
	Deferrals int       `json:"deferrals,omitempty"`
	Attempts  int       `json:"delivery_attempts,omitempty"`
	NextTry   time.Time `json:"next_try,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	History   []string  `json:"history,omitempty"`
	Updated   time.Time `json:"updated"`
}

// jobStore keeps job records in a JetStream key-value bucket whose entries
// expire after the job TTL. Writes are plain publishes to the bucket's
// subject, without waiting for the stream's ack: they cost the admission
// path no round trip and can never stall it, and a lost write only makes a
// record stale.
type jobStore struct {
	nc  *nats.Conn
	kv  jetstream.KeyValue
	log *slog.Logger
}

const jobBucket = "SHAPER_JOBS"

func openJobStore(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int, log *slog.Logger) (*jobStore, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      jobBucket,
		Description: "shaper job records",
		TTL:         ttl,
		History:     1,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("shaper: job records: %w", err)
	}
	return &jobStore{nc: js.Conn(), kv: kv, log: log}, nil
}

func (j *jobStore) put(r jobRecord) {
	if j == nil {
		return
	}
	r.Updated = time.Now().UTC()
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	if err := j.nc.Publish("$KV."+jobBucket+"."+r.ID, b); err != nil {
		j.log.Debug("job record", "id", r.ID, "err", err)
	}
}

func (j *jobStore) get(ctx context.Context, id string) (*jobRecord, error) {
	e, err := j.kv.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var r jobRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (s *Shaper) handleJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rec, err := s.findJob(r.Context(), id)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, rec)
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		writeOutcome(w, failed(http.StatusNotFound, "no job "+quote(id)+" (unknown, or its record expired)"))
	default:
		writeOutcome(w, unavailable("job records", err))
	}
}

// findJob returns what is known of job id. A job admitted straight into
// its queue has no record until something happens to it (a delivery, a
// failed attempt): its id names its queue and sequence, and while it is
// stored there it is queued. The record is read again after a miss in the
// queue, since a delivered job's record is written just before the job is
// removed.
func (s *Shaper) findJob(ctx context.Context, id string) (*jobRecord, error) {
	if !queue.ValidJobID(id) {
		return nil, jetstream.ErrInvalidKey // never used in a subject
	}
	rec, err := s.jobs.get(ctx, id)
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, err
	}
	rt, seq := s.queueOf(id)
	if rt == nil {
		return nil, err
	}
	m, err := rt.q.Lookup(ctx, seq)
	switch {
	case err == nil:
		return &jobRecord{ID: id, Policy: rt.pol.Load().Name, Key: m.Key, Status: statusQueued, Updated: m.EnqueuedAt.UTC()}, nil
	case errors.Is(err, queue.ErrEmpty):
		return s.jobs.get(ctx, id)
	default:
		return nil, err
	}
}

// queueOf returns the runtime whose queue made id, and the job's sequence;
// a nil runtime for an id no queue made.
func (s *Shaper) queueOf(id string) (*runtime, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, rt := range s.runtimes {
		if seq, ok := rt.q.SeqOf(id); ok {
			return rt, seq
		}
	}
	return nil, 0
}
