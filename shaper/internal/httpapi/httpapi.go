// Package httpapi writes the answers of the shaper's HTTP API: JSON bodies
// and RFC 9457 problem details, the same shape on every route.
package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
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
	Deferred     bool   `json:"deferred"`
	ID           string `json:"id,omitempty"`
}

// WriteJSON writes v as the JSON body of a code answer.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

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
		h.Set("Retry-After", strconv.FormatInt(max((ms+999)/1000, 1), 10))
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
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

// Quote quotes s for a message, cut to 64 runes.
func Quote(s string) string {
	if r := []rune(s); len(r) > 64 {
		s = string(r[:64]) + "…"
	}
	return strconv.Quote(s)
}
