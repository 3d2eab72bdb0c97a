package shaper

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/limiter"
)

// Handler returns the Shaper's HTTP API:
//
//	POST /v1/jobs/{policy}/{key}   submit a job (body = payload)
//	GET  /v1/jobs/{id}             a job's status: queued, deferred, delivered or dead
//	GET  /v1/policies              every policy with its live figures
//	GET  /v1/dead?policy=&key=&reason=&limit=     dead letters
//	GET  /v1/dead/{policy}/{seq}   one dead letter with its payload
//	POST /v1/dead/replay?policy=&key=&reason=     submit dead letters again
//	DELETE /v1/dead?policy=&key=&reason=          purge dead letters
//	GET  /v1/policies/{name}       one policy
//	PUT  /v1/policies/{name}       tune a policy live (JSON with the fields to change)
//	DELETE /v1/policies/{name}/override   back to the policy file
//	GET  /healthz                  the process is alive
//	GET  /readyz                   the Shaper accepts jobs (JetStream reachable)
//	GET  /metrics                  the figures in the Prometheus text format
func (s *Shaper) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs/{policy}/{key...}", s.handleSubmit)
	mux.HandleFunc("POST /v1/jobs/{policy}", func(w http.ResponseWriter, r *http.Request) {
		writeOutcome(w, failed(http.StatusBadRequest, "bad key: empty (POST /v1/jobs/{policy}/{key})"))
	})
	mux.HandleFunc("GET /v1/policies", s.handlePolicies)
	mux.HandleFunc("GET /v1/policies/{name}", s.handlePolicy)
	mux.HandleFunc("PUT /v1/policies/{name}", s.handlePolicyPut)
	mux.HandleFunc("DELETE /v1/policies/{name}/override", s.handleOverrideDelete)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "uptime_s": int(time.Since(s.started).Seconds())})
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.HandleFunc("GET /v1/jobs/{id}", s.handleJob)
	mux.HandleFunc("GET /v1/dead", s.handleDeadList)
	mux.HandleFunc("GET /v1/dead/{policy}/{seq}", s.handleDeadShow)
	mux.HandleFunc("POST /v1/dead/replay", s.handleDeadReplay)
	mux.HandleFunc("DELETE /v1/dead", s.handleDeadPurge)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	return mux
}

func (s *Shaper) handleSubmit(w http.ResponseWriter, r *http.Request) {
	sub := submission{
		policy:      r.PathValue("policy"),
		key:         r.PathValue("key"),
		idempotency: r.Header.Get("Idempotency-Key"),
		traceparent: r.Header.Get("traceparent"),
	}
	limit := s.maxPayload(sub.policy)
	if r.ContentLength > int64(limit) {
		writeOutcome(w, failed(http.StatusRequestEntityTooLarge, errTooLarge(limit)))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeOutcome(w, failed(http.StatusRequestEntityTooLarge, errTooLarge(limit)))
			return
		}
		writeOutcome(w, failed(http.StatusBadRequest, "reading body: "+err.Error()))
		return
	}
	sub.payload = body
	writeOutcome(w, s.submit(r.Context(), sub))
}

// maxPayload is the payload limit of the named policy's queue (the default
// for an unknown policy, which submit answers with 404 anyway).
func (s *Shaper) maxPayload(policy string) int {
	if rt := s.runtime(policy); rt != nil {
		return rt.q.MaxPayload()
	}
	return 1 << 20
}

// writeOutcome renders o: 202 with the job, or application/problem+json.
func writeOutcome(w http.ResponseWriter, o outcome) {
	h := w.Header()
	if o.limits != nil {
		limiter.SetHeaders(h, o.Policy, *o.limits, o.window)
	}
	if o.RetryAfterMs > 0 {
		secs := (o.RetryAfterMs + 999) / 1000
		h.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	}
	if o.Code == http.StatusAccepted {
		writeJSON(w, o.Code, struct {
			ID        string `json:"id"`
			Policy    string `json:"policy"`
			Key       string `json:"key"`
			Queued    int64  `json:"queued"`
			ETAms     int64  `json:"eta_ms"`
			Duplicate bool   `json:"duplicate,omitempty"`
		}{o.ID, o.Policy, o.Key, o.Queued, o.ETAms, o.Duplicate})
		return
	}
	p := problem{
		Type:     "about:blank",
		Title:    http.StatusText(o.Code),
		Status:   o.Code,
		Detail:   o.Error,
		Policy:   o.Policy,
		Key:      o.Key,
		Deferred: o.Deferred,
		ID:       o.ID,
	}
	if o.RetryAfterMs > 0 {
		ra := o.RetryAfterMs
		p.RetryAfterMs = &ra
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(o.Code)
	json.NewEncoder(w).Encode(p)
}

// problem is an RFC 9457 problem detail with shaper's extension members.
type problem struct {
	Type         string `json:"type"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail,omitempty"`
	Policy       string `json:"policy,omitempty"`
	Key          string `json:"key,omitempty"`
	RetryAfterMs *int64 `json:"retry_after_ms,omitempty"`
	Deferred     bool   `json:"deferred"`
	ID           string `json:"id,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (s *Shaper) handleReady(w http.ResponseWriter, r *http.Request) {
	switch {
	case !s.serving.Load():
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not serving"})
	case s.nc == nil || s.nc.Status() != nats.CONNECTED:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "nats " + s.nc.Status().String()})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}
