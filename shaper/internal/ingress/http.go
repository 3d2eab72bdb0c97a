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
	mux.HandleDirect("POST", "/v1/jobs/", "policy", "key", guard(in.handleSubmit))
	mux.HandleFunc("POST /v1/jobs/{policy}", guard(func(w http.ResponseWriter, r *http.Request) {
		// The policy is judged first, as with a key: an unknown one is 404.
		if _, _, a, ok := in.gate(submission{policy: r.PathValue("policy")}); !ok {
			writeAnswer(w, a)
			return
		}
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
	body, err := readBody(w, r, limit)
	if err != nil {
		a := failed(http.StatusBadRequest, "reading body: "+err.Error())
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			a = failed(http.StatusRequestEntityTooLarge, queue.ErrTooLarge.Error()+": at most "+strconv.Itoa(limit)+" bytes")
		}
		writeAnswer(w, in.refusedEarly(r.Context(), jobtrace.HTTPCarrier(r.Header), sub, transportHTTP, a))
		return
	}
	sub.payload = body
	writeAnswer(w, in.admit(r.Context(), jobtrace.HTTPCarrier(r.Header), sub, transportHTTP))
}

// readBody reads r's body of at most limit bytes (a longer one is a
// *http.MaxBytesError). A small body of a declared length is read into a
// buffer of that length, with no buffer grown for it; a larger one grows
// as it comes, so that a client declaring a large body and sending none
// holds no large buffer.
func readBody(w http.ResponseWriter, r *http.Request, limit int) ([]byte, error) {
	if r.ContentLength > int64(limit) {
		return nil, &http.MaxBytesError{Limit: int64(limit)}
	}
	if r.ContentLength < 0 || r.ContentLength > smallBody {
		return io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	}
	// A body of a declared length ends there (the server holds it to
	// that length): no bound is needed to read it.
	buf := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// smallBody is the largest declared body readBody reads into a buffer made
// before the body comes.
const smallBody = 16 << 10

// writeAnswer renders a: 202 with the job, or application/problem+json,
// with the rate-limit headers of the limit that decided.
func writeAnswer(w http.ResponseWriter, a answer) {
	if a.limits.Limit > 0 {
		limiter.SetHeaders(w.Header(), a.Policy, a.limits, a.window)
	}
	if a.Code == http.StatusAccepted {
		w.Header()["Content-Type"] = jsonType
		w.WriteHeader(a.Code)
		o := a.accepted()
		o.Write(w)
		return
	}
	p := httpapi.Problem{
		Status:    a.Code,
		Detail:    a.Error,
		Policy:    a.Policy,
		Key:       a.Key,
		Deferred:  a.Deferred,
		ID:        a.ID,
		Duplicate: a.Duplicate, // set on a deferred refusal only
	}
	httpapi.WriteProblem(w, p, msDuration(a.RetryAfterMs))
}

// jsonType is the Content-Type of a 202, shared: a header's values are
// copied when the answer is written, never changed in place.
var jsonType = []string{"application/json"}

// accepted is the body of a 202: the job, as encoding/json writes
// the struct of its fields (TestAcceptedAsEncodingJSON).
func (a answer) accepted() httpapi.Object {
	var o httpapi.Object
	o.String("id", a.ID)
	o.String("policy", a.Policy)
	o.String("key", a.Key)
	o.Int("queued", a.Queued)
	o.Int("eta_ms", a.ETAms)
	if a.Duplicate {
		o.Bool("duplicate", true)
	}
	if !a.WaitingSince.IsZero() {
		o.Time("waiting_for_consumer_since", a.WaitingSince)
	}
	return o
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
