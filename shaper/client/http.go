package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultUserAgent is the User-Agent of a Client whose Config names none.
const DefaultUserAgent = "shaper-client"

// Config holds a Client's optional settings; the zero value means the
// documented defaults.
type Config struct {
	// HTTPClient does the requests. Default http.DefaultClient. A load
	// generator gives it a Transport with MaxIdleConnsPerHost at its
	// concurrency, so that connections are reused.
	HTTPClient *http.Client
	// Token, when set, is sent with every request as
	// "Authorization: Bearer <Token>".
	Token string
	// UserAgent is sent as User-Agent. Default DefaultUserAgent.
	UserAgent string
}

// Client talks to one shaper's HTTP API. It is safe for concurrent use;
// its zero value is not usable (see New).
type Client struct {
	http  *http.Client
	base  string   // scheme://host[/prefix], no trailing slash
	agent []string // the User-Agent header's value, shared read-only by every request
	auth  []string // the Authorization header's value, or nil
}

// New returns a Client of the shaper whose HTTP API is at baseURL
// ("http://127.0.0.1:8080", or with a path prefix when a proxy serves it
// under one).
func New(baseURL string, cfg Config) (*Client, error) {
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("client: base URL: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("client: base URL %q: want http:// or https://", baseURL)
	case u.Host == "":
		return nil, fmt.Errorf("client: base URL %q has no host", baseURL)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("client: base URL %q has a query or fragment", baseURL)
	}
	c := &Client{
		http:  cfg.HTTPClient,
		base:  strings.TrimRight(u.String(), "/"),
		agent: []string{cfg.UserAgent},
	}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	if cfg.UserAgent == "" {
		c.agent[0] = DefaultUserAgent
	}
	if cfg.Token != "" {
		c.auth = []string{"Bearer " + cfg.Token}
	}
	return c, nil
}

// errEmptyName is returned for a route that needs a policy name given "".
var errEmptyName = fmt.Errorf("client: empty policy name: %w", ErrUnknownPolicy)

// Job returns what the shaper knows of job id. An unknown id, or one past
// the horizon of job status, is ErrNotFound.
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	var j Job
	err := c.call(ctx, http.MethodGet, "/v1/jobs/"+segment(id), nil, &j, false)
	return j, err
}

// Policies returns every policy with its live figures, sorted by name.
func (c *Client) Policies(ctx context.Context) ([]Policy, error) {
	var l policyList
	err := c.call(ctx, http.MethodGet, "/v1/policies", nil, &l, false)
	return l.Policies, err
}

// Removed returns the policies a reload of the shaper removed while their
// streams still held jobs (GET /v1/policies, "removed"), sorted by name.
func (c *Client) Removed(ctx context.Context) ([]RemovedPolicy, error) {
	var l policyList
	err := c.call(ctx, http.MethodGet, "/v1/policies", nil, &l, false)
	return l.Removed, err
}

// Policy returns the named policy with its live figures (ErrUnknownPolicy
// when the shaper has none of that name).
func (c *Client) Policy(ctx context.Context, name string) (Policy, error) {
	var p Policy
	if name == "" {
		return p, errEmptyName
	}
	err := c.call(ctx, http.MethodGet, "/v1/policies/"+segment(name), nil, &p, true)
	return p, err
}

// SetPolicy changes the named policy live on every shaper of the cluster
// and returns it as it now is: the fields change sets change, those it
// resets go back to the policy file's, and every other field keeps its
// value (see PolicyChange). A change the shaper refuses (a bad value, a
// change of deliver or name) is ErrBadRequest and changes nothing.
func (c *Client) SetPolicy(ctx context.Context, name string, change PolicyChange) (Policy, error) {
	var p Policy
	if name == "" {
		return p, errEmptyName
	}
	body, err := json.Marshal(change)
	if err != nil {
		return p, fmt.Errorf("client: policy change: %w", err)
	}
	err = c.call(ctx, http.MethodPut, "/v1/policies/"+segment(name), body, &p, true)
	return p, err
}

// ResetPolicy drops the named policy's live override, returning every
// field to what the policy file says, and returns it as it now is. To
// reset one field, SetPolicy it to policies.Null.
func (c *Client) ResetPolicy(ctx context.Context, name string) (Policy, error) {
	var p Policy
	if name == "" {
		return p, errEmptyName
	}
	err := c.call(ctx, http.MethodDelete, "/v1/policies/"+segment(name)+"/override", nil, &p, true)
	return p, err
}

// DeadLetters lists a page of the dead letters f selects (f.Limit, by
// default 100, from f.After on), without their payloads, in order of
// policy and sequence; DeadLetterPage also says where the next page
// starts, and AllDeadLetters follows the pages. A filter naming an unknown
// policy is ErrUnknownPolicy; a bad reason, key, limit or cursor
// ErrBadRequest.
func (c *Client) DeadLetters(ctx context.Context, f DeadFilter) ([]DeadLetter, error) {
	p, err := c.DeadLetterPage(ctx, f)
	return p.Dead, err
}

// DeadLetter returns dead letter seq of policy with its payload. A 404 is
// ErrNotFound: the shaper does not say whether the policy or the dead
// letter is unknown.
func (c *Client) DeadLetter(ctx context.Context, policy string, seq uint64) (DeadLetter, error) {
	var d DeadLetter
	if policy == "" {
		return d, errEmptyName
	}
	err := c.call(ctx, http.MethodGet, "/v1/dead/"+segment(policy)+"/"+strconv.FormatUint(seq, 10), nil, &d, false)
	return d, err
}

// ReplayDead submits the dead letters f selects again through the normal
// admission path (each as a new job) and removes each one that was kept
// (202 or deferred). The zero filter replays every dead letter.
func (c *Client) ReplayDead(ctx context.Context, f DeadFilter) (DeadReport, error) {
	var r DeadReport
	f.After = "" // not a listing
	err := c.call(ctx, http.MethodPost, "/v1/dead/replay"+f.query(), nil, &r, f.Policy != "")
	return r, err
}

// PurgeDead deletes the dead letters f selects for good. The zero filter
// purges every dead letter of every policy.
func (c *Client) PurgeDead(ctx context.Context, f DeadFilter) (DeadReport, error) {
	var r DeadReport
	f.After = ""
	err := c.call(ctx, http.MethodDelete, "/v1/dead"+f.query(), nil, &r, f.Policy != "")
	return r, err
}

// query returns f as a query string, "" or "?…".
func (f DeadFilter) query() string {
	return query(f.Limit, "policy", f.Policy, "key", f.Key, "reason", f.Reason, "after", f.After)
}

// query returns a query string, "" or "?…", of limit when above 0 and of
// the parameters (name, value, …) that are not "".
func query(limit int, params ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		if params[i+1] != "" {
			q.Set(params[i], params[i+1])
		}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// Health returns GET /healthz: the shaper process is alive.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.call(ctx, http.MethodGet, "/healthz", nil, &h, false)
	return h, err
}

// Ready reports whether the shaper accepts jobs: nil, or an error that is
// ErrUnavailable (with the shaper's reason as the problem's detail) when it
// is not serving or has lost JetStream.
func (c *Client) Ready(ctx context.Context) error {
	const op = "GET /readyz"
	resp, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := readAnswer(resp.Body, maxProblem)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	// /readyz answers {"status": "..."}, not a problem.
	var r struct {
		Status string `json:"status"`
	}
	if resp.StatusCode == http.StatusServiceUnavailable && json.Unmarshal(body, &r) == nil && r.Status != "" {
		return &Error{StatusCode: resp.StatusCode, Problem: Problem{Status: resp.StatusCode, Detail: r.Status}, op: op}
	}
	return errorFrom(op, resp, body, false)
}

// Largest answers read: a problem, and any successful answer (a dead
// letter shown with a 1 MiB payload in base64, a replay of many).
const (
	maxProblem = 64 << 10
	maxAnswer  = 256 << 20
)

// call does method path with the JSON body (when not nil) and decodes a
// 2xx answer into out; any other answer is an *Error. policyRoute says a
// 404 from this route means an unknown policy.
func (c *Client) call(ctx context.Context, method, path string, body []byte, out any, policyRoute bool) error {
	var contentType []string
	if body != nil {
		contentType = jsonType
	}
	resp, err := c.do(ctx, method, path, body, contentType)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, err := readAnswer(resp.Body, maxProblem)
		if err != nil {
			return fmt.Errorf("client: %s %s: %w", method, path, err)
		}
		return errorFrom(method+" "+path, resp, b, policyRoute)
	}
	b, err := readAnswer(resp.Body, maxAnswer)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("client: %s %s: %w: %v", method, path, ErrBadAnswer, err)
	}
	return nil
}

// Request headers, written under their canonical names, shared read-only.
var (
	octetStream = []string{"application/octet-stream"}
	jsonType    = []string{"application/json"}
)

// do sends one request to the shaper, with body (when not nil) of
// contentType. A transport error is returned wrapped; the caller closes the
// answer's body.
func (c *Client) do(ctx context.Context, method, path string, body []byte, contentType []string) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	req.Header["User-Agent"] = c.agent
	if c.auth != nil {
		req.Header["Authorization"] = c.auth
	}
	if contentType != nil {
		req.Header["Content-Type"] = contentType
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err) // a *url.Error: it names the method and URL
	}
	return resp, nil
}

// readAnswer reads body, at most limit bytes of it.
func readAnswer(body io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: answer over %d bytes", ErrBadAnswer, limit)
	}
	return b, nil
}

// buffers hold submission answers while they are decoded.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// errorFrom makes the *Error of an answer with a status that is not a
// success, from its problem body or, when it has none, its text.
func errorFrom(op string, resp *http.Response, body []byte, policyRoute bool) *Error {
	e := &Error{StatusCode: resp.StatusCode, op: op, policyRoute: policyRoute}
	if !decodeProblem(body, &e.Problem) {
		e.Problem = Problem{Status: resp.StatusCode, Detail: textDetail(body)}
	}
	e.RetryAfter = retryAfter(e.Problem.RetryAfterMs, resp.Header)
	return e
}

// decodeProblem decodes body into p, reporting whether it is a problem
// (a JSON object with a status).
func decodeProblem(body []byte, p *Problem) bool {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return false
	}
	var q Problem
	if json.Unmarshal(body, &q) != nil || q.Status == 0 {
		return false
	}
	*p = q
	return true
}

// textDetail is the first line of a plain-text answer, cut to 200 bytes.
func textDetail(body []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.ToValidUTF8(strings.TrimSpace(s), "�")
}

// retryAfter is the answer's retry_after_ms when it has one, else its
// Retry-After header (seconds or an HTTP date), else 0.
func retryAfter(ms int64, h http.Header) time.Duration {
	if ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
