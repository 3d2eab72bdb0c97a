package policies

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/shaper-dev/shaper/internal/suggest"
	"github.com/shaper-dev/shaper/limiter"
)

// Bounds on Policy.Queue.
const (
	minQueue = 1
	maxQueue = 1_000_000
)

// MaxPartitions bounds Policy.Partitions (the drain package's bound).
const MaxPartitions = 256

// MaxConcurrency bounds Concurrency.Key and Concurrency.Total.
const MaxConcurrency = 10_000

// maxStreamLen is the longest JetStream stream name the server accepts.
const maxStreamLen = 255

// algorithms are the names of the admission algorithms: the limiter
// package's list, the one list there is.
var algorithms = func() []string {
	names := make([]string, len(limiter.Algorithms))
	for i, a := range limiter.Algorithms {
		names[i] = string(a)
	}
	return names
}()

// windowed reports whether the algorithm named name counts whole jobs per
// window (and takes no burst).
func windowed(name string) bool {
	return slices.Contains(algorithms, name) && !limiter.Algorithm(name).Bursts()
}

// Validate reports whether p obeys the rules of the policy file format, as
// an *Error (several joined with errors.Join) without a file position. Fields
// that Parse would default must be set: Validate checks p as it is, so that a
// policy that passes is complete. Patch.Resolve and Set.With fill in the
// defaults first.
// Uniqueness of names is a property of a Set and is not checked here.
func (p Policy) Validate() error {
	errs := p.validate()
	for _, e := range errs {
		e.Policy = p.Name
	}
	return joinErrors(errs)
}

// validate returns p's problems in field order, each with Field and Msg set.
func (p *Policy) validate() []*Error {
	var errs []*Error
	add := func(field, format string, args ...any) {
		errs = append(errs, &Error{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if msg := checkName(p.Name); msg != "" {
		add("name", "%s", msg)
	}
	if p.Outflow.IsZero() {
		add("outflow", "missing: want a rate such as 20/s")
	} else if err := p.Outflow.check(); err != nil {
		add("outflow", "rate %s: %v", p.Outflow, err)
	}
	if p.Partitions < 0 || p.Partitions > MaxPartitions {
		add("partitions", "%d: want a whole number from 1 to %d", p.Partitions, MaxPartitions)
	}
	if p.Queue < minQueue || p.Queue > maxQueue {
		add("queue", "%d: want a whole number from %d to %d", p.Queue, minQueue, maxQueue)
	}
	if p.Overflow != OverflowReject && p.Overflow != OverflowDefer {
		add("overflow", "%q: want %q or %q%s", p.Overflow, OverflowReject, OverflowDefer,
			suggest.Hint(string(p.Overflow), []string{string(OverflowReject), string(OverflowDefer)}))
	}
	if (p.Total != Rate{}) {
		if err := p.Total.check(); err != nil {
			add("total", "rate %s: %v", p.Total, err)
		}
	}
	switch c := p.Concurrency; {
	case c.Key < 1 || c.Key > MaxConcurrency:
		add("concurrency.key", "%d: want a whole number from 1 to %d", c.Key, MaxConcurrency)
	case c.Total < 0 || c.Total > MaxConcurrency:
		add("concurrency.total", "%d: want a whole number from 1 to %d", c.Total, MaxConcurrency)
	case c.Total > 0 && c.Key > c.Total:
		add("concurrency.key", "%d: more than concurrency.total (%d): a key cannot have more deliveries awaiting receipt than the whole policy", c.Key, c.Total)
	}

	d := p.Deliver
	if d.Webhook != "" {
		if msg := checkWebhook(d.Webhook); msg != "" {
			add("deliver.webhook", "%s", msg)
		}
		var other []string
		if d.Subject != "" {
			other = append(other, "subject")
		}
		if d.Stream != "" {
			other = append(other, "stream")
		}
		if d.Mode != "" {
			other = append(other, "mode")
		}
		if len(other) > 0 {
			add("deliver.webhook", "a webhook excludes %s: deliver either to NATS or to a webhook", strings.Join(other, " and "))
		}
	} else if msg := checkSubject(d.Subject); msg != "" {
		add("deliver.subject", "%s", msg)
	}
	switch {
	case d.Mode != "" && d.Mode != DeliverConfirm && d.Mode != DeliverPublish:
		add("deliver.mode", "%q: want %q (a consumer replies to each job: at least once) or %q (at most once)%s", d.Mode, DeliverConfirm, DeliverPublish,
			suggest.Hint(string(d.Mode), []string{string(DeliverConfirm), string(DeliverPublish)}))
	case d.Mode == DeliverPublish && d.Stream != "":
		add("deliver.mode", "%q: a stream delivery waits for the stream's acknowledgement; leave mode out", d.Mode)
	}
	if d.Stream != "" {
		if msg := checkStream(d.Stream); msg != "" {
			add("deliver.stream", "%s", msg)
		}
	}
	if d.Timeout <= 0 {
		add("deliver.timeout", "%v: want a positive duration", d.Timeout)
	}

	r := p.Retry
	if r.Attempts < 1 {
		add("retry.attempts", "%d: want at least 1", r.Attempts)
	}
	if r.Backoff <= 0 {
		add("retry.backoff", "%v: want a positive duration", r.Backoff)
	}
	if r.MaxBackoff <= 0 {
		add("retry.max_backoff", "%v: want a positive duration", r.MaxBackoff)
	}
	if r.Backoff > 0 && r.MaxBackoff > 0 && r.Backoff > r.MaxBackoff {
		add("retry.backoff", "%v is more than max_backoff %v", r.Backoff, r.MaxBackoff)
	}
	if r.Deadline <= 0 {
		add("retry.deadline", "%v: want a positive duration", r.Deadline)
	}
	if !r.Budget.usable() {
		add("retry.budget", "%s: %s", r.Budget, budgetWant)
	}

	if a := p.Admit; a != nil {
		if a.Algorithm == "" {
			add("admit.algorithm", "missing: want one of %s", strings.Join(algorithms, ", "))
		} else if !slices.Contains(algorithms, a.Algorithm) {
			add("admit.algorithm", "%q: want one of %s%s", a.Algorithm, strings.Join(algorithms, ", "), suggest.Hint(a.Algorithm, algorithms))
		}
		switch err := a.Limit.check(); {
		case a.Limit.IsZero():
			add("admit.limit", "missing: want a rate such as 600/m")
		case err != nil:
			add("admit.limit", "rate %s: %v", a.Limit, err)
		case windowed(a.Algorithm) && a.Limit.N != math.Trunc(a.Limit.N):
			add("admit.limit", "rate %s: %s counts whole jobs per window: N must be a whole number", a.Limit, a.Algorithm)
		}
		if a.Burst < 0 {
			add("admit.burst", "%d: want 0 or more", a.Burst)
		} else if a.Burst > 0 && windowed(a.Algorithm) {
			add("admit.burst", "%s takes no burst: only %s do", a.Algorithm, strings.Join(bursting(), " and "))
		}
		if a.Fail != FailOpen && a.Fail != FailClosed {
			add("admit.fail", "%q: want %q or %q%s", a.Fail, FailOpen, FailClosed, suggest.Hint(string(a.Fail), []string{string(FailOpen), string(FailClosed)}))
		}
	}
	if a := p.Adapt; a != nil {
		a.validate(p, add)
	}
	return errs
}

// checkName returns what is wrong with a policy name, or "".
func checkName(name string) string {
	if name == "" {
		return "missing: want a name of letters, digits, _ and -"
	}
	if len(name) > MaxNameLen {
		return fmt.Sprintf("%q is %d bytes long, more than %d", name, len(name), MaxNameLen)
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Sprintf("%q: want only letters, digits, _ and -", name)
		}
	}
	return ""
}

// checkSubject returns what is wrong with a delivery subject prefix, or "".
// The prefix must be a literal NATS subject, since keys are appended to it
// as one more token.
func checkSubject(s string) string {
	if s == "" {
		return "missing: want a NATS subject such as shaper.out.orders"
	}
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%q is not valid UTF-8", s)
	}
	for _, c := range s {
		switch {
		case c == '*' || c == '>':
			return fmt.Sprintf("%q: wildcards are not allowed, the key is appended as the last token", s)
		case unicode.IsSpace(c) || unicode.IsControl(c):
			return fmt.Sprintf("%q: spaces and control characters are not allowed in a subject", s)
		}
	}
	if slices.Contains(strings.Split(s, "."), "") {
		return fmt.Sprintf("%q: empty token (subjects look like a.b.c)", s)
	}
	for _, own := range reservedSubjects {
		if subjectsOverlap(s, own) {
			return fmt.Sprintf("%q: the shaper's own subjects (%s.>) are not for deliveries: a job delivered there would be taken as a submission, a job or a request to the server; deliver under shaper.out, or a subject of your own", s, own)
		}
	}
	if s[0] == '$' || s[0] == '_' {
		return fmt.Sprintf("%q: subjects starting with $ or _ are NATS's and JetStream's (their APIs, inboxes) and the shaper's own: deliver under shaper.out, or a subject of your own", s)
	}
	return ""
}

// reservedSubjects are the roots of the subjects the shaper submits, keeps
// and answers on: deliveries there would loop or reach its internals.
var reservedSubjects = []string{"shaper.submit", "shaper.q", "shaper.deferred", "shaper.dead", "shaper.job", "shaper.jobs", "shaper.record", "shaper.lane"}

// checkStream returns what is wrong with a JetStream stream name, or "".
func checkStream(s string) string {
	if len(s) > maxStreamLen {
		return fmt.Sprintf("stream name is %d bytes long, more than %d", len(s), maxStreamLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%q is not valid UTF-8", s)
	}
	for _, c := range s {
		if c == '.' || c == '*' || c == '>' || c == '/' || c == '\\' || unicode.IsSpace(c) || unicode.IsControl(c) {
			return fmt.Sprintf("%q: a stream name may not contain . * > / \\ spaces or control characters", s)
		}
	}
	return ""
}

// checkWebhook returns what is wrong with a webhook URL, or "".
func checkWebhook(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Sprintf("%q is not a URL", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Sprintf("%q: want an http:// or https:// URL", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Sprintf("%q: URL has no host", s)
	}
	return ""
}

// bursting lists the algorithms that take a burst.
func bursting() []string {
	var out []string
	for _, a := range limiter.Algorithms {
		if a.Bursts() {
			out = append(out, string(a))
		}
	}
	return out
}
