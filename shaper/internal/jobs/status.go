package jobs

import (
	"cmp"
	"context"
	"errors"
	"net/http"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// Finder returns the policy and queue whose stream made job id, and the
// job's sequence there; ok false for an id no queue made.
type Finder func(id string) (policy string, q *queue.Queue, seq uint64, ok bool)

// Waiting says why the queued jobs of key of policy wait beyond their turn
// ("": they do not), as the reason of their status.
type Waiting func(policy, key string) string

// Handler serves GET /v1/jobs/{id}.
func (s *Store) Handler(find Finder, waiting Waiting) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		rec, err := s.Status(r.Context(), id, find)
		if err == nil && rec.Status == Queued && rec.Reason == "" {
			rec.Reason = waiting(rec.Policy, rec.Key)
		}
		switch {
		case err == nil:
			httpapi.WriteJSON(w, http.StatusOK, rec)
		case errors.Is(err, ErrNotFound):
			httpapi.Error(w, http.StatusNotFound, "no job "+httpapi.Quote(id)+" (unknown, or past the horizon of job status)")
		default:
			httpapi.Unavailable(w, "job status", err)
		}
	}
}

// Status returns what is known of job id, ErrNotFound when nothing is.
//
// A record, when there is one, says it. Otherwise a job named after its
// place is queued while it is stored there, and delivered once it is gone
// from below the queue's last sequence, within the horizon. The record is
// read again after a miss in the queue, since a job that needed one has it
// written before it leaves its queue (a dead letter), or just before (a
// delivery after failed attempts).
func (s *Store) Status(ctx context.Context, id string, find Finder) (*Record, error) {
	if !queue.ValidJobID(id) {
		return nil, ErrNotFound
	}
	rec, err := s.Get(ctx, id)
	if !errors.Is(err, ErrNotFound) {
		return rec, err
	}
	policy, q, seq, ok := find(id)
	if !ok {
		return nil, ErrNotFound
	}
	m, err := q.Lookup(ctx, seq)
	switch {
	case err == nil:
		return &Record{ID: id, Policy: policy, Key: m.Key, Status: Queued, Updated: m.EnqueuedAt.UTC()}, nil
	case !errors.Is(err, queue.ErrEmpty):
		return nil, err
	}
	if rec, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
		return rec, err
	}
	last, err := q.LastSeq(ctx)
	if err != nil {
		return nil, err
	}
	epoch, _, _ := queue.ParseJobID(id)
	if seq > last {
		return nil, ErrNotFound
	}
	within, err := s.covers(ctx, policy, epoch, seq)
	if err != nil || !within {
		return nil, cmp.Or(err, ErrNotFound)
	}
	return &Record{ID: id, Policy: policy, Status: Delivered}, nil
}
