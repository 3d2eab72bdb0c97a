// Package httpapi writes the answers of the shaper's HTTP API: JSON bodies
// and RFC 9457 problem details, the same shape on every route.
package httpapi

import (
	"encoding/json"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/internal/suggest"
)

// Problem is an RFC 9457 problem detail with the shaper's extension members.
type Problem struct {
	Type         string `json:"type"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail,omitempty"`
	Policy       string `json:"policy,omitempty"`
	Key          string `json:"key,omitempty"`
	RetryAfterMs *int64 `json:"retry_after_ms,omitempty"`
	ID           string `json:"id,omitempty"`
	// Duplicate says a deferred 429 answers a resubmission (the same
	// Idempotency-Key) of a job deferred before: nothing new was kept.
	Duplicate bool `json:"duplicate,omitempty"`
	// Deferred is set in 429 answers to a submission only: whether the job
	// was kept (a deferred job) or not.
	Deferred *bool `json:"deferred,omitempty"`
}

// WriteJSON writes v as the JSON body of a code answer.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// The values of the headers every problem answer sets, shared: a header's
// values are copied when the answer is written, never changed in place.
var (
	problemType = []string{"application/problem+json"}
	nosniff     = []string{"nosniff"}
)

// WriteProblem writes p as an application/problem+json answer with p's
// status, filling in Type and Title when empty. A positive retryAfter sets
// Retry-After (whole seconds, rounded up) and retry_after_ms.
func WriteProblem(w http.ResponseWriter, p Problem, retryAfter time.Duration) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	h := w.Header()
	if retryAfter > 0 {
		ms := CeilMs(retryAfter)
		p.RetryAfterMs = &ms
		h["Retry-After"] = []string{strconv.FormatInt(max((ms+999)/1000, 1), 10)}
	}
	h["Content-Type"] = problemType
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// Error writes a problem answer of status code saying detail.
func Error(w http.ResponseWriter, code int, detail string) {
	WriteProblem(w, Problem{Status: code, Detail: detail}, 0)
}

// DefaultUnavailableWait is the Retry-After of a 503 answer.
const DefaultUnavailableWait = time.Second

// Unavailable writes the 503 answer when what (a JetStream-backed part of
// the shaper) failed with err: come back after DefaultUnavailableWait.
func Unavailable(w http.ResponseWriter, what string, err error) {
	WriteProblem(w, Problem{Status: http.StatusServiceUnavailable, Detail: what + " unavailable: " + err.Error()}, DefaultUnavailableWait)
}

// CeilMs rounds d up to whole milliseconds, 0 for d <= 0.
func CeilMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// UnknownPolicy is the detail of a 404 for policy, naming the policies
// known (sorted), and the one it was probably meant to be (suggest.Hint).
func UnknownPolicy(policy string, known []string) string {
	if len(known) == 0 {
		return "unknown policy " + Quote(policy) + "; no policies are served"
	}
	return "unknown policy " + Quote(policy) + "; known: " + strings.Join(known, ", ") + suggest.Hint(policy, known)
}

// Quote quotes s for a message, cut to 64 runes.
func Quote(s string) string {
	if len(s) <= 64 { // 64 runes at most: nothing to cut
		return strconv.Quote(s)
	}
	if r := []rune(s); len(r) > 64 {
		s = string(r[:64]) + "…"
	}
	return strconv.Quote(s)
}

// methods are the methods NotFound looks for routes of.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// NotFound returns the handler of the requests no other route of mux
// takes, to register as its "/" pattern: a 405 problem with Allow when the
// path has routes for other methods, else a 404 problem.
func NotFound(mux *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range methods {
			probe := *r
			probe.Method = m
			if _, pattern := mux.Handler(&probe); pattern != "" && pattern != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			Error(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+Quote(r.URL.Path)+"; allowed: "+strings.Join(allow, ", "))
			return
		}
		Error(w, http.StatusNotFound, "no route "+r.Method+" "+Quote(r.URL.Path)+routeHint(r.URL.Path))
	}
}

// routeHint is what a 404 adds to point at the route meant: the API's
// prefix, or a job route's segments.
func routeHint(p string) string {
	switch {
	case !strings.HasPrefix(p, "/v1/"):
		return " (the API is under /v1/)"
	case p == "/v1/jobs/" || strings.HasPrefix(p, "/v1/jobs/") && strings.Count(p, "/") == 3:
		return " (submit with POST /v1/jobs/{policy}/{key}, ask with GET /v1/jobs/{id})"
	}
	return " (see GET /v1/policies for the policies, and the API reference for the routes)"
}

// Mux is an http.ServeMux that remembers the patterns registered on it, in
// order, so that the routes a shaper serves can be listed (the API
// reference, docs/api.md, is checked against them).
type Mux struct {
	*http.ServeMux
	patterns []string
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern, as http.ServeMux.Handle does.
func (m *Mux) Handle(pattern string, h http.Handler) {
	m.ServeMux.Handle(pattern, h)
	m.patterns = append(m.patterns, pattern)
}

// HandleFunc registers h for pattern, as http.ServeMux.HandleFunc does.
func (m *Mux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.ServeMux.HandleFunc(pattern, h)
	m.patterns = append(m.patterns, pattern)
}

// ServeHTTP serves r as http.ServeMux does, except that a path under /v1/
// with a ".", ".." or empty segment is refused (400), not redirected to
// its cleaned form (307): a key's unescaped "/../" would otherwise move a
// submission to another policy, and an HTTP client follows a 307 with
// the body.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The decoded path holds every "/" and "." the escaped one does: one
	// without "//" or "/." needs no escaping to be checked.
	if d := r.URL.Path; strings.Contains(d, "//") || strings.Contains(d, "/.") {
		if p := r.URL.EscapedPath(); strings.HasPrefix(p, "/v1/") && !canonical(p) {
			Error(w, http.StatusBadRequest, "path "+Quote(p)+" has a \".\", \"..\" or empty segment: escape a key's \"/\" as %2F, and a key \".\" or \"..\" as %2E or %2E%2E")
			return
		}
	}
	m.ServeMux.ServeHTTP(w, r)
}

// canonical reports whether p is its own cleaned form, the form
// http.ServeMux redirects every other path to.
func canonical(p string) bool {
	if !strings.Contains(p, "//") && !strings.Contains(p, "/.") {
		return true
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// Patterns returns the patterns registered so far, in order.
func (m *Mux) Patterns() []string { return append([]string(nil), m.patterns...) }
