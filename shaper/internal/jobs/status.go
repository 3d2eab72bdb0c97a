package jobs

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// Finder returns the policy and queue whose stream made job id, and the
// job's sequence there; ok false for an id no queue made.
type Finder func(id string) (policy string, q *queue.Queue, seq uint64, ok bool)

// Waiting says why the queued jobs of key of policy wait beyond their turn
// ("": they do not), as the reason of their status.
type Waiting func(policy, key string) string

// NextTry returns when the drain tries the failed job id of key of policy
// again, by the schedule of the shaper that delivers the key; false when
// it holds no such job waiting (it is being attempted now).
type NextTry func(policy, key, id string) (time.Time, bool)

// Delivering says whether the queued job id of key of policy is being
// delivered now, by the shaper that delivers the key: since when, and its
// attempt (0: not known).
type Delivering func(policy, key, id string) (since time.Time, attempt int, ok bool)

// Drain is what job status reads of the queues and asks of the drain.
type Drain struct {
	Find       Finder
	Waiting    Waiting
	NextTry    NextTry
	Delivering Delivering
}

// stillFull is the reason of a deferred job past its next try while its
// key's jobs wait for no consumer.
const stillFull = "the key's queue was still full at next_try: it is re-admitted as soon as the key has room"

// PastNextTry is the reason of deferred job rec when now is past its next
// try ("" when it is not): re-admission waits, without counting a
// deferral, while the key's queue stays full, so next_try was the plan.
func PastNextTry(rec *Record, now time.Time, waiting Waiting) string {
	if rec.NextTry.IsZero() || !now.After(rec.NextTry) {
		return ""
	}
	return cmp.Or(waiting(rec.Policy, rec.Key), stillFull)
}

// Handler serves GET /v1/jobs/{id}. A failed job's next_try is read from
// the drain's schedule when asked (nextTry), since the time planned at
// its failure moves with the key's slots and the retries due before it;
// while it is being attempted, its record's stays.
func (s *Store) Handler(d Drain) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		rec, err := s.Answer(r.Context(), id, d)
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

// Answer is what GET /v1/jobs/{id} (and its NATS subject) answers of job
// id: its Status, with a failed job's next try read from the drain's
// schedule and why a job waits beyond its turn.
func (s *Store) Answer(ctx context.Context, id string, d Drain) (*Record, error) {
	rec, err := s.Status(ctx, id, d.Find)
	if err != nil {
		return nil, err
	}
	if rec.Status == Queued && !rec.NextTry.IsZero() {
		if at, ok := d.NextTry(rec.Policy, rec.Key, id); ok {
			rec.NextTry = at
		}
	}
	if rec.Status == Queued && d.Delivering != nil {
		if since, attempt, ok := d.Delivering(rec.Policy, rec.Key, id); ok {
			rec.DeliveringSince, rec.DeliveringAttempt = since.UTC(), attempt
		}
	}
	if rec.Reason == "" && rec.DeliveringSince.IsZero() {
		switch rec.Status {
		case Queued:
			rec.Reason = d.Waiting(rec.Policy, rec.Key)
		case Deferred:
			rec.Reason = PastNextTry(rec, time.Now(), d.Waiting)
		}
	}
	return rec, nil
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
