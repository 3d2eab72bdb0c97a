package drain

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// WebhookSink POSTs each job to an HTTP endpoint. The body is the payload;
// the Shaper-* headers and traceparent travel as HTTP headers. A 2xx answer
// is a delivery; 429 or 503 with a Retry-After in the future is a
// *RetryAfterError (the drainer pauses the key that long); any other
// answer (a redirect too: it is not followed, since following it would
// take the job elsewhere, and a 302 or 303 without its body), a
// transport error or a timeout is a failed delivery. It is safe for
// concurrent use.
type WebhookSink struct {
	url     string
	client  *http.Client
	timeout time.Duration
}

var _ Sink = (*WebhookSink)(nil)

// maxRetryAfter bounds the pause a downstream can ask for.
const maxRetryAfter = time.Hour

// NewWebhookSink returns a sink posting to url, each delivery bounded by
// timeout (10 s when 0). client may be nil for a default client.
func NewWebhookSink(url string, timeout time.Duration, client *http.Client) *WebhookSink {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if client == nil {
		client = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &WebhookSink{url: url, client: &c, timeout: timeout}
}

// Deliver implements Sink.
func (s *WebhookSink) Deliver(ctx context.Context, d *Delivery) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(d.Msg.Payload))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDelivery, err)
	}
	for k, v := range d.Header() {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := s.client.Do(req)
	if timedOut(ctx, err) {
		// First: the URL's error is cut short in the dead-letter list.
		return fmt.Errorf("%w: %s: %w", ErrDelivery, noAnswer(s.timeout), err) // a timeout stays one (Pace.Adapt)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDelivery, err) // a timeout stays one (Pace.Adapt)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		// A Retry-After of 0, or of a date already past, asks for no
		// pause: a failed attempt then, with the policy's backoff, not an
		// immediate try again that counts toward nothing.
		if after, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok && after > 0 {
			return &RetryAfterError{After: after, Cause: resp.Status}
		}
	}
	return fmt.Errorf("%w: webhook answered %s", ErrDelivery, resp.Status)
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return min(time.Duration(n)*time.Second, maxRetryAfter), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}
