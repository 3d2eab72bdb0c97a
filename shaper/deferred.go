package shaper

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
	"github.com/shaper-dev/shaper/shaper/internal/listing"
)

// DeferredJob is a deferred job as GET /v1/deferred lists it: where it
// waits in its policy's deferred stream, and, as its job record says (GET
// /v1/jobs/{id}), how often its re-admission failed, when it is next tried
// and why it failed last.
type DeferredJob struct {
	Seq        uint64    `json:"seq"`
	Policy     string    `json:"policy"`
	Key        string    `json:"key"`
	ID         string    `json:"id"`
	DeferredAt time.Time `json:"deferred_at"`
	Deferrals  int       `json:"deferrals"`
	NextTry    time.Time `json:"next_try,omitzero"`
	// Reason says why a job past its next try is still deferred.
	Reason    string `json:"reason,omitempty"`
	LastError string `json:"last_error,omitempty"`
	Size      int    `json:"size"`
}

// deferredList is the body of GET /v1/deferred.
type deferredList struct {
	Deferred []DeferredJob `json:"deferred"`
	Next     string        `json:"next,omitempty"`
}

// recordReads bounds the job-record reads of one page in flight at once.
const recordReads = 8

// handleDeferred serves GET /v1/deferred?policy=&key=&limit=&after=: a
// page of the deferred jobs of a policy (or of every policy), in order of
// policy and of sequence in the deferred stream, read from the cursor on,
// headers only: a page costs what it holds, however many jobs wait.
func (s *Shaper) handleDeferred(w http.ResponseWriter, r *http.Request) {
	if !httpapi.Query(w, r, "policy", "key", "limit", "after") {
		return
	}
	q := r.URL.Query()
	policy, key := q.Get("policy"), q.Get("key")
	names := s.policies.names()
	if policy != "" && !slices.Contains(names, policy) {
		httpapi.Error(w, http.StatusNotFound, httpapi.UnknownPolicy(policy, names))
		return
	}
	streams := listing.Streams{JS: s.js, Name: func(p string) string { return deferStreamPrefix + p }}
	if key != "" {
		token, err := queue.EncodeKey(key)
		if err != nil {
			httpapi.Error(w, http.StatusBadRequest, err.Error())
			return
		}
		streams.Subject = func(p string) string { return deferSubjectRoot + "." + p + "." + token }
	}
	req, bad := listing.Parse(q)
	if bad == "" && policy != "" && req.After != (listing.Cursor{}) && req.After.Policy != policy {
		bad = "after " + httpapi.Quote(q.Get("after")) + ": a cursor of policy " + httpapi.Quote(req.After.Policy) + "'s deferred jobs, not " + httpapi.Quote(policy) + "'s"
	}
	if bad != "" {
		httpapi.Error(w, http.StatusBadRequest, bad)
		return
	}
	if policy != "" {
		names = []string{policy}
	}
	list := deferredList{Deferred: []DeferredJob{}}
	next, err := streams.Page(r.Context(), names, req, func(policy string, m jetstream.Msg, md *jetstream.MsgMetadata) bool {
		j := DeferredJob{Seq: md.Sequence.Stream, Policy: policy, ID: m.Headers().Get(queue.HeaderJobID),
			DeferredAt: md.Timestamp.UTC(), Size: listing.Size(m)}
		token := strings.TrimPrefix(m.Subject(), deferSubjectRoot+"."+policy+".")
		j.Key, _ = queue.DecodeKey(token)
		list.Deferred = append(list.Deferred, j)
		return true
	})
	if err != nil {
		httpapi.Unavailable(w, "backend", err)
		return
	}
	if next != nil {
		list.Next = next.String()
	}
	s.withRecords(r.Context(), list.Deferred)
	httpapi.WriteJSON(w, http.StatusOK, list)
}

// withRecords fills in the deferrals, next try and last error of each of
// js from its job record, recordReads at a time. A job without a record
// (not written yet, or gone) keeps none.
func (s *Shaper) withRecords(ctx context.Context, js []DeferredJob) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sem := make(chan struct{}, recordReads)
	var wg sync.WaitGroup
	for i := range js {
		j := &js[i]
		if j.ID == "" {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rec, err := s.jobs.Get(ctx, j.ID)
			if err != nil || rec.Status != jobs.Deferred {
				return
			}
			j.Deferrals, j.NextTry, j.LastError = rec.Deferrals, rec.NextTry, rec.LastError
			j.Reason = jobs.PastNextTry(rec, time.Now(), s.policies.waiting)
		})
	}
	wg.Wait()
}
