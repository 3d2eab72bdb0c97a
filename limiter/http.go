package limiter

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"
)

// DefaultPolicyName names the policy in the RateLimit headers Middleware writes.
const DefaultPolicyName = "default"

// SetHeaders writes the rate-limit headers of r into h: RateLimit-Policy
// (`"name";q=<limit>;w=<window seconds>`, omitted when window is 0) and
// RateLimit (`"name";r=<remaining>;t=<seconds to reset>`) in the syntax of
// the IETF httpapi RateLimit headers draft, X-Ratelimit-Limit and
// X-Ratelimit-Remaining; and, when r is a rejection, Retry-After and
// X-Ratelimit-Retry-After. Durations are rounded up to whole seconds, and
// Retry-After is at least 1 so that clients never retry at once.
//
// It runs on every admission, so it writes the header map directly under the
// names' canonical forms (what Set would store, without canonicalising each
// name again).
func SetHeaders(h http.Header, name string, r Result, window time.Duration) {
	// The values are pieces of one string, their []string pieces of one
	// array: two allocations, not one or two a header.
	quoted := strconv.AppendQuote(nil, name)
	b := make([]byte, 0, 2*len(quoted)+96)
	var ends [5]int
	if window > 0 {
		b = strconv.AppendInt(append(append(b, quoted...), ";q="...), r.Limit, 10)
		b = strconv.AppendInt(append(b, ";w="...), ceilSeconds(window), 10)
	}
	ends[0] = len(b)
	b = strconv.AppendInt(append(append(b, quoted...), ";r="...), r.Remaining, 10)
	b = strconv.AppendInt(append(b, ";t="...), ceilSeconds(r.Reset), 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, r.Limit, 10)
	ends[2] = len(b)
	b = strconv.AppendInt(b, r.Remaining, 10)
	ends[3] = len(b)
	if !r.Allowed {
		b = strconv.AppendInt(b, max(ceilSeconds(r.RetryAfter), 1), 10)
	}
	ends[4] = len(b)
	all := string(b)
	vals := make([]string, 5)
	for i, start := 0, 0; i < len(ends); i++ {
		vals[i], start = all[start:ends[i]], ends[i]
	}
	one := func(i int) []string { return vals[i : i+1 : i+1] }
	if window > 0 {
		h["Ratelimit-Policy"] = one(0)
	}
	h["Ratelimit"] = one(1)
	h["X-Ratelimit-Limit"] = one(2)
	h["X-Ratelimit-Remaining"] = one(3)
	if !r.Allowed {
		h["Retry-After"] = one(4)
		h["X-Ratelimit-Retry-After"] = one(4)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// ceilSeconds rounds d up to whole seconds, 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// limitReporter is met by the limiters of this package; Middleware uses it
// to announce the window in RateLimit-Policy.
type limitReporter interface{ Limit() Limit }

// Middleware limits the requests a handler sees, per the key keyFunc
// returns for each request (nil keyFunc: the client IP of RemoteAddr). An
// admitted request gets the rate-limit headers of SetHeaders and goes to
// the next handler. A rejected one is answered 429 Too Many Requests with
// Retry-After. When the limiter fails closed (Allow returns a rejecting
// Result with an error wrapping ErrUnavailable) the answer is 503 Service
// Unavailable with Retry-After; when it fails open the request goes
// through without headers. The returned middleware is safe for concurrent use.
func Middleware(l Limiter, keyFunc func(*http.Request) string) func(http.Handler) http.Handler {
	if keyFunc == nil {
		keyFunc = clientIP
	}
	var window time.Duration
	if lr, ok := l.(limitReporter); ok {
		window = lr.Limit().Period
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			res, err := l.Allow(req.Context(), keyFunc(req))
			switch {
			case err != nil && res.Allowed:
				next.ServeHTTP(w, req)
			case err != nil:
				w.Header().Set("Retry-After", itoa(max(ceilSeconds(res.RetryAfter), 1)))
				code := http.StatusServiceUnavailable
				if !errors.Is(err, ErrUnavailable) {
					code = http.StatusInternalServerError
				}
				http.Error(w, http.StatusText(code), code)
			case !res.Allowed:
				SetHeaders(w.Header(), DefaultPolicyName, res, window)
				http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
			default:
				SetHeaders(w.Header(), DefaultPolicyName, res, window)
				next.ServeHTTP(w, req)
			}
		})
	}
}

// clientIP is the host part of req.RemoteAddr.
func clientIP(req *http.Request) string {
	host, _, err := net.SplitHostPort(req.RemoteAddr)
	if err != nil {
		return req.RemoteAddr
	}
	return host
}
