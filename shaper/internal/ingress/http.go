package ingress

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

// Routes adds the submission routes to mux, behind guard: POST
// /v1/jobs/{policy}/{key} (body = payload; Idempotency-Key and traceparent
// headers optional).
func (in *Ingress) Routes(mux *httpapi.Mux, guard httpapi.Guard) {
	mux.HandleFunc("POST /v1/jobs/{policy}/{key...}", guard(in.handleSubmit))
	mux.HandleFunc("POST /v1/jobs/{policy}", guard(func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, failed(http.StatusBadRequest, "bad key: empty (POST /v1/jobs/{policy}/{key})"))
	}))
}

func (in *Ingress) handleSubmit(w http.ResponseWriter, r *http.Request) {
	sub := submission{
		policy:      r.PathValue("policy"),
		key:         r.PathValue("key"),
		idempotency: r.Header.Get("Idempotency-Key"),
	}
	limit := queue.DefaultMaxPayload // an unknown policy is answered 404 anyway
	if g, _ := in.cfg.Gate(sub.policy); g != nil {
		limit = g.MaxPayload()
	}
	tooLarge := failed(http.StatusRequestEntityTooLarge, queue.ErrTooLarge.Error()+": at most "+strconv.Itoa(limit)+" bytes")
	if r.ContentLength > int64(limit) {
		writeAnswer(w, tooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeAnswer(w, tooLarge)
			return
		}
		writeAnswer(w, failed(http.StatusBadRequest, "reading body: "+err.Error()))
		return
	}
	sub.payload = body
	writeAnswer(w, in.admit(r.Context(), jobtrace.HTTPCarrier(r.Header), sub, transportHTTP))
}

// writeAnswer renders a: 202 with the job, or application/problem+json,
// with the rate-limit headers of the limit that decided.
func writeAnswer(w http.ResponseWriter, a answer) {
	if a.limits.Limit > 0 {
		limiter.SetHeaders(w.Header(), a.Policy, a.limits, a.window)
	}
	if a.Code == http.StatusAccepted {
		httpapi.WriteJSON(w, a.Code, struct {
			ID        string `json:"id"`
			Policy    string `json:"policy"`
			Key       string `json:"key"`
			Queued    int64  `json:"queued"`
			ETAms     int64  `json:"eta_ms"`
			Duplicate bool   `json:"duplicate,omitempty"`
		}{a.ID, a.Policy, a.Key, a.Queued, a.ETAms, a.Duplicate})
		return
	}
	p := httpapi.Problem{
		Status:   a.Code,
		Detail:   a.Error,
		Policy:   a.Policy,
		Key:      a.Key,
		Deferred: a.Deferred,
		ID:       a.ID,
	}
	httpapi.WriteProblem(w, p, msDuration(a.RetryAfterMs))
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
