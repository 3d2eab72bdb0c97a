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
	o := p.object()
	o.Write(w)
}

// object is p as encoding/json writes it (its tags, in order).
func (p Problem) object() Object {
	var o Object
	o.String("type", p.Type)
	o.String("title", p.Title)
	o.Int("status", int64(p.Status))
	o.OmitEmpty("detail", p.Detail)
	o.OmitEmpty("policy", p.Policy)
	o.OmitEmpty("key", p.Key)
	if p.RetryAfterMs != nil {
		o.Int("retry_after_ms", *p.RetryAfterMs)
	}
	o.OmitEmpty("id", p.ID)
	if p.Duplicate {
		o.Bool("duplicate", true)
	}
	if p.Deferred != nil {
		o.Bool("deferred", *p.Deferred)
	}
	return o
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
	direct   *direct // HandleDirect's route, nil without one
}

// direct is a route served without the ServeMux's routing: requests of
// method under prefix, with two path values (first, and rest for what is
// left).
type direct struct {
	method, prefix, first, rest string
	h                           http.HandlerFunc
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

// HandleDirect registers h for the pattern "method prefix{first}/{rest...}"
// (prefix ends in "/"), as HandleFunc does, and serves the requests it
// matches whose path needs no unescaping without the ServeMux's routing,
// which costs a tenth of answering a 429: the submissions' route. The path
// values are the ServeMux's (FuzzDirect). One route at most.
func (m *Mux) HandleDirect(method, prefix, first, rest string, h http.HandlerFunc) {
	if m.direct != nil || !strings.HasSuffix(prefix, "/") {
		panic("httpapi: HandleDirect: one route, under a prefix ending in /")
	}
	m.HandleFunc(method+" "+prefix+"{"+first+"}/{"+rest+"...}", h)
	m.direct = &direct{method: method, prefix: prefix, first: first, rest: rest, h: h}
}

// ServeHTTP serves r as http.ServeMux does, except that a path with a
// ".", ".." or empty segment is refused (400), not redirected to its
// cleaned form (307): a key's unescaped "/../" would otherwise move a
// submission to another policy, and an HTTP client follows a 307 with
// the body. That holds for any path, not only those under /v1/: a tour's
// "//v1/jobs/orders/a/../../emails/b" was redirected to emails' key b. A
// path under /v1/jobs/{policy}/ may not end in "/" either: its last
// segment is empty (a trailing "/" made key "k/" of a submission to
// ".../k/").
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The decoded path holds every "/" and "." the escaped one does: one
	// without "//", "/." or a last "/" needs no escaping to be checked.
	if d := r.URL.Path; strings.Contains(d, "//") || strings.Contains(d, "/.") || trailingKeySlash(d) {
		if p := r.URL.EscapedPath(); !canonical(p) || trailingKeySlash(p) {
			Error(w, http.StatusBadRequest, "path "+Quote(p)+" has a \".\", \"..\" or empty segment: escape a key's \"/\" as %2F, and a key \".\" or \"..\" as %2E or %2E%2E")
			return
		}
	}
	if d := m.direct; d != nil && r.Method == d.method && r.URL.RawPath == "" && strings.HasPrefix(r.URL.Path, d.prefix) {
		// No RawPath: the path's escaped form is its default one, so its
		// segments unescape to the decoded path's.
		if a, b, ok := strings.Cut(r.URL.Path[len(d.prefix):], "/"); ok && a != "" && b != "" {
			r.SetPathValue(d.first, a)
			r.SetPathValue(d.rest, b)
			d.h(w, r)
			return
		}
	}
	m.ServeMux.ServeHTTP(w, r)
}

// trailingKeySlash reports whether p, a path under /v1/jobs/{policy}/,
// ends with an empty segment.
func trailingKeySlash(p string) bool {
	return strings.HasPrefix(p, "/v1/jobs/") && strings.Count(p, "/") >= 4 && strings.HasSuffix(p, "/")
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
