package shaper

import (
	"context"
	"net/http"
	"slices"

	"github.com/shaper-dev/shaper/policies"
)

// PolicyStatus is a policy with its live figures, as GET /v1/policies shows it.
type PolicyStatus struct {
	policies.Policy
	Keys        int    `json:"keys"`            // keys with jobs queued
	Queued      int64  `json:"queued"`          // jobs queued over all keys
	Admitted    uint64 `json:"admitted"`        // jobs accepted (202) since start
	Duplicates  uint64 `json:"duplicates"`      // resubmissions answered from the duplicate window
	Rejected    uint64 `json:"rejected"`        // jobs refused with 429 since start
	Unavailable uint64 `json:"unavailable"`     // submissions answered 503
	Limited     uint64 `json:"limited"`         // submissions refused by the admission limit
	Shadow      uint64 `json:"shadow_limited"`  // submissions a shadow admission limit would have refused
	LimiterErrs uint64 `json:"limiter_errors"`  // admission decisions the limiter backend failed
	Deferred    uint64 `json:"deferred"`        // jobs deferred (429 deferred) since start
	DeferQueued int64  `json:"deferred_queued"` // deferred jobs waiting for re-admission
	Readmitted  uint64 `json:"readmitted"`      // deferred jobs put back into their queue since start
	Dead        uint64 `json:"dead"`            // dead letters kept for the policy
	Delivered   uint64 `json:"delivered"`       // jobs delivered since start
	Failed      uint64 `json:"failed"`          // failed delivery attempts since start
	Override    bool   `json:"override"`        // tuned live: differs from the policy file
	Draining    bool   `json:"draining"`        // this shaper holds the policy's drain lease
	InFlight    int    `json:"in_flight"`       // deliveries in progress
}

// Status returns every policy with its live figures, sorted by name.
func (s *Shaper) Status() []PolicyStatus {
	s.mu.RLock()
	names := make([]string, 0, len(s.runtimes))
	for n := range s.runtimes {
		names = append(names, n)
	}
	s.mu.RUnlock()
	slices.Sort(names)
	out := make([]PolicyStatus, 0, len(names))
	for _, n := range names {
		if st, ok := s.policyStatus(n); ok {
			out = append(out, st)
		}
	}
	return out
}

func (s *Shaper) policyStatus(name string) (PolicyStatus, bool) {
	rt := s.runtime(name)
	if rt == nil {
		return PolicyStatus{}, false
	}
	ds := rt.d.Stats()
	return PolicyStatus{
		Policy:      *rt.pol.Load(),
		Keys:        ds.Keys,
		Queued:      ds.Queued,
		Admitted:    rt.counter.admitted.Load(),
		Duplicates:  rt.counter.duplicates.Load(),
		Rejected:    rt.counter.rejected.Load(),
		Unavailable: rt.counter.unavailable.Load(),
		Limited:     rt.counter.limited.Load(),
		Shadow:      rt.counter.shadowLimited.Load(),
		LimiterErrs: rt.counter.limiterErrors.Load(),
		Deferred:    rt.counter.deferred.Load(),
		DeferQueued: rt.deferD.Stats().Queued,
		Readmitted:  rt.counter.readmitted.Load(),
		Dead:        s.deadCount(context.Background(), name),
		Delivered:   ds.Delivered,
		Failed:      ds.Failed,
		Override:    rt.override.Load(),
		Draining:    rt.d.Active(),
		InFlight:    ds.InFlight,
	}, true
}

func (s *Shaper) handlePolicies(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"policies": s.Status()})
}

func (s *Shaper) handlePolicy(w http.ResponseWriter, r *http.Request) {
	st, ok := s.policyStatus(r.PathValue("name"))
	if !ok {
		writeOutcome(w, failed(http.StatusNotFound, "unknown policy "+quote(r.PathValue("name"))))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// Depths returns the jobs stored per key in the policy's queue, read from
// JetStream (exact, but one request over every key: for tests and tools).
func (s *Shaper) Depths(ctx context.Context, policy string) map[string]uint64 {
	rt := s.runtime(policy)
	if rt == nil {
		return nil
	}
	d, err := rt.q.Depths(ctx)
	if err != nil {
		return nil
	}
	return d
}
