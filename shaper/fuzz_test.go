package shaper_test

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzHTTPAPI sends arbitrary requests to a real shaper (embedded
// JetStream): whatever the method, path, headers and body, the answer is a
// documented status with a well-formed body — never a 500, a hang or a
// crash — and the shaper keeps serving. `go test` runs the seeds; `go test
// -fuzz FuzzHTTPAPI ./shaper/` explores.
func FuzzHTTPAPI(f *testing.F) {
	seeds := []struct {
		method, path, header, value string
		body                        []byte
	}{
		{"POST", "/v1/jobs/p/k", "", "", []byte("hello")},
		{"POST", "/v1/jobs/p/%2e%2e", "Idempotency-Key", "x", nil},
		{"POST", "/v1/jobs/p/a.b.*.>", "traceparent", "00-zz-yy-01", nil},
		{"POST", "/v1/jobs/nope/k", "", "", nil},
		{"POST", "/v1/jobs/p/" + strings.Repeat("k", 300), "", "", nil},
		{"GET", "/v1/jobs/dn1ml4ye3996-ya", "", "", nil},
		{"GET", "/v1/jobs/../../etc/passwd", "", "", nil},
		{"GET", "/v1/policies/p", "", "", nil},
		{"PUT", "/v1/policies/p", "Content-Type", "application/json", []byte(`{"outflow":"5/s","queue":-1}`)},
		{"PUT", "/v1/policies/p", "", "", []byte(`{"outflow":`)},
		{"DELETE", "/v1/policies/p/override", "", "", nil},
		{"GET", "/v1/dead?policy=p&reason=%ff&limit=-5", "", "", nil},
		{"GET", "/v1/dead/p/18446744073709551616", "", "", nil},
		{"POST", "/v1/dead/replay?policy=nope", "", "", nil},
		{"DELETE", "/v1/dead", "", "", nil},
		{"POST", "/v1/reload", "Authorization", "Bearer x", nil},
		{"PATCH", "/v1/jobs/p/k", "", "", nil},
		{"GET", "/nowhere", "", "", nil},
		{"GET", "/metrics", "", "", nil},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.header, s.value, s.body)
	}
	r := start(f, "policies:\n  - name: p\n    outflow: 1000/s\n    queue: 5\n  - name: d\n    outflow: 1/s\n    queue: 1\n    overflow: defer\n")
	hc := &http.Client{Timeout: 10 * time.Second}
	f.Fuzz(func(t *testing.T, method, path, header, value string, body []byte) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequest(method, r.base+path, bytes.NewReader(body))
		if err != nil {
			return // not a request an HTTP client can send
		}
		if header != "" {
			req.Header.Set(header, value) // the client refuses a bad one below
		}
		resp, err := hc.Do(req)
		if err != nil {
			if strings.Contains(err.Error(), "invalid header") || strings.Contains(err.Error(), "invalid method") {
				return // refused by the client, never sent
			}
			t.Fatalf("%s %q: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200, 202, 204, 400, 401, 403, 404, 405, 409, 413, 415, 429, 503:
		default:
			t.Fatalf("%s %q (%s: %q, %d bytes) = %d %s", method, path, header, value, len(body), resp.StatusCode, b)
		}
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if resp.StatusCode >= 400 && ct != "application/problem+json" {
			t.Errorf("%s %q = %d with Content-Type %q, want application/problem+json: %s", method, path, resp.StatusCode, ct, b)
		}
		health, err := hc.Get(r.base + "/healthz")
		if err != nil || health.StatusCode != 200 {
			t.Fatalf("after %s %q the shaper is not healthy: %v", method, path, err)
		}
		health.Body.Close()
	})
}
