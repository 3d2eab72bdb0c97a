package shaper

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
	"github.com/shaper-dev/shaper/shaper/internal/deadletter"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// PolicyStatus is a policy with its live figures, as GET /v1/policies shows it.
type PolicyStatus struct {
	policies.Policy
	Keys        int    `json:"keys"`             // keys with jobs queued
	Queued      int64  `json:"queued"`           // jobs queued over all keys
	Admitted    uint64 `json:"admitted"`         // jobs accepted (202) since start
	Duplicates  uint64 `json:"duplicates"`       // resubmissions answered from the duplicate window
	Rejected    uint64 `json:"rejected"`         // jobs refused with 429 since start
	Unavailable uint64 `json:"unavailable"`      // submissions answered 503
	Limited     uint64 `json:"limited"`          // submissions refused by the admission limit
	Shadow      uint64 `json:"shadow_limited"`   // submissions a shadow admission limit would have refused
	LimiterErrs uint64 `json:"limiter_errors"`   // admission decisions the limiter backend failed
	Deferred    uint64 `json:"deferred"`         // jobs deferred (429 deferred) since start
	DeferQueued int64  `json:"deferred_queued"`  // deferred jobs waiting for re-admission
	Readmitted  uint64 `json:"readmitted"`       // deferred jobs put back into their queue since start
	Dead        uint64 `json:"dead"`             // dead letters kept for the policy
	Delivered   uint64 `json:"delivered"`        // jobs delivered since start
	Failed      uint64 `json:"failed"`           // failed delivery attempts since start
	Retries     uint64 `json:"retries"`          // attempts that retried a failed job (the retry budget's use)
	RetriesHeld uint64 `json:"retries_deferred"` // slots in which a due retry gave way to a fresh job (budget spent)
	Aside       int    `json:"stepped_aside"`    // failed jobs waiting for a retry while their key's fresh jobs go on
	Override    bool   `json:"override"`         // tuned live: differs from the policy file
	Draining    bool   `json:"draining"`         // this shaper holds the policy's drain lease
	InFlight    int    `json:"in_flight"`        // deliveries in progress
}

// status returns every policy with its live figures, sorted by name.
func (t *table) status(ctx context.Context) []PolicyStatus {
	lines := t.snapshot()
	out := make([]PolicyStatus, len(lines))
	for i, line := range lines {
		out[i] = t.lineStatus(ctx, line.name, line.served)
	}
	return out
}

// policyStatus returns policy name with its live figures, and false when
// it is not served.
func (t *table) policyStatus(ctx context.Context, name string) (PolicyStatus, bool) {
	line := t.line(name)
	if line == nil {
		return PolicyStatus{}, false
	}
	return t.lineStatus(ctx, name, line), true
}

// lineStatus returns the live figures of policy name, served by line.
func (t *table) lineStatus(ctx context.Context, name string, line *served) PolicyStatus {
	ds := line.Drain.Stats()
	c := line.Gate.Counts()
	st := PolicyStatus{
		Policy:      *line.Gate.Policy(),
		Keys:        ds.Keys,
		Queued:      ds.Queued,
		Admitted:    c.Admitted,
		Duplicates:  c.Duplicates,
		Rejected:    c.Rejected,
		Unavailable: c.Unavailable,
		Limited:     c.Limited,
		Shadow:      c.ShadowLimited,
		LimiterErrs: c.LimiterErrors,
		Deferred:    c.Deferred,
		DeferQueued: line.DeferDrain.Stats().Queued,
		Readmitted:  c.Readmitted,
		Delivered:   ds.Delivered,
		Failed:      ds.Failed,
		Retries:     ds.Retries,
		RetriesHeld: ds.RetriesDeferred,
		Aside:       ds.SteppedAside,
		Override:    line.override.Load(),
		Draining:    line.Drain.Active(),
		InFlight:    ds.InFlight,
	}
	t.mu.RLock()
	deadCount := t.deadCount
	t.mu.RUnlock()
	if deadCount != nil {
		st.Dead = deadCount(name)
	}
	return st
}

// routes adds the policy routes to mux:
//
//	GET    /v1/policies                  every policy with its live figures
//	GET    /v1/policies/{name}           one policy
//	PUT    /v1/policies/{name}           tune it live (JSON with the fields to change)
//	DELETE /v1/policies/{name}/override  back to the policy file
//
// Overrides are stored in c, for every shaper. Tuning is behind admin.
func (t *table) routes(mux *http.ServeMux, c *cluster.Cluster, admin httpapi.Guard, log *slog.Logger) {
	mux.HandleFunc("GET /v1/policies", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"policies": t.status(r.Context())})
	})
	mux.HandleFunc("GET /v1/policies/{name}", func(w http.ResponseWriter, r *http.Request) {
		t.writeStatus(w, r, r.PathValue("name"))
	})
	mux.HandleFunc("PUT /v1/policies/{name}", admin(func(w http.ResponseWriter, r *http.Request) {
		t.handlePut(w, r, c, log)
	}))
	mux.HandleFunc("DELETE /v1/policies/{name}/override", admin(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		file, ok := t.fileVersion(name)
		if !ok || t.line(name) == nil {
			httpapi.Error(w, http.StatusNotFound, httpapi.UnknownPolicy(name, t.names()))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := c.DeleteOverride(ctx, name); err != nil {
			httpapi.Unavailable(w, "backend", err)
			return
		}
		if err := t.apply(ctx, file, false, log); err != nil {
			httpapi.Unavailable(w, "backend", err)
			return
		}
		t.writeStatus(w, r, name)
	}))
}

func (t *table) writeStatus(w http.ResponseWriter, r *http.Request, name string) {
	st, ok := t.policyStatus(r.Context(), name)
	if !ok {
		httpapi.Error(w, http.StatusNotFound, httpapi.UnknownPolicy(name, t.names()))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, st)
}

// handlePut serves PUT /v1/policies/{name}: the body is a JSON object with
// the fields to change, as GET shows them ({"outflow": "10/s", "queue":
// 50}). Bad input changes nothing and is answered 400.
func (t *table) handlePut(w http.ResponseWriter, r *http.Request, c *cluster.Cluster, log *slog.Logger) {
	name := r.PathValue("name")
	line := t.line(name)
	if line == nil {
		httpapi.Error(w, http.StatusNotFound, httpapi.UnknownPolicy(name, t.names()))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		httpapi.Error(w, http.StatusRequestEntityTooLarge, "policy body: "+err.Error())
		return
	}
	p := line.Gate.Policy().Clone()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		httpapi.Error(w, http.StatusBadRequest, inPolicy(name, err))
		return
	}
	if p.Name != name {
		httpapi.Error(w, http.StatusBadRequest, "policy "+httpapi.Quote(name)+": name cannot change")
		return
	}
	p.Line = 0
	if p, err = t.normalize(p); err != nil {
		httpapi.Error(w, http.StatusBadRequest, inPolicy(name, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := c.PutOverride(ctx, p); err != nil {
		httpapi.Unavailable(w, "backend", err)
		return
	}
	// Apply here at once as well: the watch brings it to the other shapers.
	if err := t.apply(ctx, p, true, log); err != nil {
		httpapi.Unavailable(w, "backend", err)
		return
	}
	t.writeStatus(w, r, name)
}

// inPolicy words err about policy name, naming the policy once.
func inPolicy(name string, err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "policy "+strconv.Quote(name)) {
		return msg // the policy's validation names it already
	}
	return "policy " + httpapi.Quote(name) + ": " + msg
}

// DeadLetter is one dead-lettered job as GET /v1/dead shows it.
type DeadLetter = deadletter.Letter
