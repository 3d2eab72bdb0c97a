package client

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Conditions callers branch on, matched with errors.Is against the errors
// of Client's and NATS's methods.
var (
	// ErrNotFound: the shaper answered 404 (an unknown job, dead letter or
	// policy).
	ErrNotFound = errors.New("not found")
	// ErrUnknownPolicy: a 404 from a route whose only 404 is an unknown
	// policy (submissions, /v1/policies/{name}, a dead-letter filter by
	// policy). Such an error is ErrNotFound too.
	ErrUnknownPolicy error = &alsoError{"unknown policy", ErrNotFound}
	// ErrBadRequest: the shaper answered 400 (a bad key, a bad policy
	// change, a bad filter), or a NATS submission's key cannot be encoded.
	ErrBadRequest = errors.New("bad request")
	// ErrTooLarge: the shaper answered 413 (the payload is over the limit).
	ErrTooLarge = errors.New("payload too large")
	// ErrUnauthorized: the shaper answered 401 or 403 (a missing or refused
	// bearer token).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrUnavailable: the shaper answered 503 (JetStream unreachable or
	// slow, shutting down, an admission limiter failing closed, not ready).
	// Error.RetryAfter says when to try again. A submission answered 503 may
	// have been stored; resubmit it with the same idempotency key.
	ErrUnavailable = errors.New("unavailable")
	// ErrBadAnswer: the shaper's answer could not be read (not the JSON of
	// the contract).
	ErrBadAnswer = errors.New("bad answer")
)

// alsoError is a sentinel that is another one too (errors.Is): so that an
// unknown policy the client finds itself (a name no subject can carry) is
// ErrNotFound too, as the shaper's 404 is.
type alsoError struct {
	text string
	also error
}

func (e *alsoError) Error() string        { return e.text }
func (e *alsoError) Is(target error) bool { return target == e.also }

// Error is an answer of the shaper that is not a success: an HTTP status
// outside 2xx (and 429, which Submit turns into a Result), or a NATS reply
// with status error. Match it with errors.As for its fields, or with
// errors.Is against the sentinels above.
type Error struct {
	// StatusCode is the HTTP status code (of a NATS reply: its Code).
	StatusCode int
	// Problem is the answer's problem detail. An answer that had none (a
	// proxy's, or the router's plain-text 404) leaves it zero except
	// Status and a Detail taken from the text.
	Problem Problem
	// RetryAfter is when to try again, when the answer says (503s do).
	RetryAfter time.Duration

	op          string // "PUT /v1/policies/p", "request shaper.submit.p.k"
	policyRoute bool   // a 404 means an unknown policy
	cause       error  // what failed on the client's side (the direct lane's JetStream error), or nil
}

// Unwrap returns what failed on the client's side, when the error is not
// the shaper's answer but stands for it (Direct: JetStream's error, with
// the status the shaper would have answered); nil otherwise.
func (e *Error) Unwrap() error { return e.cause }

// Error returns "client: <request>: <code> <text>: <detail>".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("client: ")
	b.WriteString(e.op)
	b.WriteString(": ")
	b.WriteString(strconv.Itoa(e.StatusCode))
	if text := http.StatusText(e.StatusCode); text != "" {
		b.WriteString(" " + text)
	}
	if e.Problem.Detail != "" {
		b.WriteString(": " + e.Problem.Detail)
	}
	return b.String()
}

// Is reports whether e is the condition target names.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrUnknownPolicy:
		return e.StatusCode == http.StatusNotFound && e.policyRoute
	case ErrBadRequest:
		return e.StatusCode == http.StatusBadRequest
	case ErrTooLarge:
		return e.StatusCode == http.StatusRequestEntityTooLarge
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrUnavailable:
		return e.StatusCode == http.StatusServiceUnavailable
	}
	return false
}
