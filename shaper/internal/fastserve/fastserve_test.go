package fastserve

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// echo answers what it was asked, so that a request seen through net/http
// and through a Server can be compared; a few paths answer in other ways.
func echo(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/nothing":
		return
	case "/sniff":
		io.WriteString(w, "<html><body>hi</body></html>")
		return
	case "/empty204":
		w.WriteHeader(http.StatusNoContent)
		return
	case "/late":
		w.Header().Set("X-Early", "1")
		w.WriteHeader(http.StatusTeapot)
		w.Header().Set("X-Late", "1") // not sent: the header was written
		io.WriteString(w, "late")
		return
	case "/multi":
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.Header()["Content-Type"] = []string{"text/plain"}
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "two")
		return
	}
	body, err := io.ReadAll(r.Body)
	var keys []string
	for k, vv := range r.Header {
		if k == "Content-Length" || k == "Transfer-Encoding" {
			continue
		}
		keys = append(keys, k+"="+strings.Join(vv, ","))
	}
	slices.Sort(keys)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Seen", r.Method)
	json.NewEncoder(w).Encode(map[string]any{
		"method": r.Method, "uri": r.RequestURI, "path": r.URL.Path, "raw_path": r.URL.RawPath,
		"query": r.URL.RawQuery, "host": r.Host, "headers": keys, "body": string(body), "err": fmt.Sprint(err),
		"proto": r.Proto, "remote": r.RemoteAddr != "", "ctx": r.Context() != nil,
	})
}

// both serves h through net/http and through a Server, and returns their
// addresses.
func both(t testing.TB, h http.Handler, cfg Config) (std, fast string) {
	t.Helper()
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(l1)
	if cfg.Context == nil {
		cfg.Context = t.Context()
	}
	fs := New(h, cfg)
	go fs.Serve(l2)
	t.Cleanup(func() { hs.Close(); fs.Close() })
	return l1.Addr().String(), l2.Addr().String()
}

// answer is what a client sees of a response: its status, the headers
// compared and the body.
type answer struct {
	status  int
	headers map[string]string
	body    string
}

func ask(t *testing.T, addr, raw string) answer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(raw, " ")
	res, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, headers: map[string]string{}, body: string(body)}
	for _, k := range []string{"Content-Length", "Content-Type", "X-Seen", "X-Early", "X-Late", "X-Multi", "Retry-After"} {
		if vv := res.Header.Values(k); len(vv) > 0 {
			a.headers[k] = strings.Join(vv, ",")
		}
	}
	return a
}

// TestAnswersAsNetHTTP sends the same raw requests to the same handler
// through net/http and through a Server: the handler sees the same
// request, and the client the same answer.
func TestAnswersAsNetHTTP(t *testing.T) {
	std, fast := both(t, http.HandlerFunc(echo), Config{MaxBody: 1 << 20})
	for _, raw := range []string{
		"GET /a/b?x=1&y=%20 HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /v1/jobs/p/k HTTP/1.1\r\nHost: h\r\nContent-Type: application/octet-stream\r\nContent-Length: 5\r\nIdempotency-Key: i-1\r\n\r\nhello",
		"POST /v1/jobs/p/k HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
		"POST /v1/jobs/p/a%2Fb%2E HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
		"POST /v1/jobs/p/a/../b HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
		"GET //x//y/./z HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /k/%E2%82%AC%00 HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /h HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\nx-lower: v\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n",
		"GET /old HTTP/1.0\r\n\r\n",
		"POST /lower HTTP/1.1\r\nhost: h\r\ncontent-length: 3\r\ncontent-type: text/plain\r\n\r\nabc",
		"POST /lower HTTP/1.1\r\nHOST: h\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"GET http://example.com/abs?q HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"HEAD /head HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /nothing HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /sniff HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /empty204 HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /late HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /multi HTTP/1.1\r\nHost: h\r\n\r\n",
	} {
		a, b := ask(t, std, raw), ask(t, fast, raw)
		if a.status != b.status || !maps(a.headers, b.headers) || a.body != b.body {
			t.Errorf("%q:\n net/http %d %v %s\n fastserve %d %v %s", raw, a.status, a.headers, a.body, b.status, b.headers, b.body)
		}
	}
	// Requests net/http refuses are refused here too (the texts differ).
	for _, raw := range []string{
		"GET /%ZZ HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: h\r\nBad Header: v\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: h\r\nX-Bad: a\x01b\r\n\r\n",
	} {
		if a, b := ask(t, std, raw), ask(t, fast, raw); a.status != b.status {
			t.Errorf("%q: net/http %d, fastserve %d", raw, a.status, b.status)
		}
	}
	// A request line and header beyond the read buffer is a 431 with a
	// problem (net/http's bound is 1 MB).
	if a := ask(t, fast, "GET /x HTTP/1.1\r\nHost: h\r\nX-Big: "+strings.Repeat("v", readBuffer)+"\r\n\r\n"); a.status != http.StatusRequestHeaderFieldsTooLarge || a.headers["Content-Type"] != "application/problem+json" {
		t.Errorf("a %d KiB header: %d %v, want 431 with a problem", readBuffer>>10, a.status, a.headers)
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestKeptStringsStay keeps what the handler was given (as the shaper
// keeps keys, ids and headers) over many requests on one connection:
// nothing kept changes when fasthttp reuses its buffers.
func TestKeptStringsStay(t *testing.T) {
	type kept struct{ method, path, header, host, query string }
	var mu sync.Mutex
	var all []kept
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		all = append(all, kept{r.Method, r.URL.Path, r.Header.Get("X-K"), r.Host, r.URL.RawQuery})
		mu.Unlock()
	})
	_, fast := both(t, h, Config{MaxBody: 1 << 20})
	c, err := net.Dial("tcp", fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	const n = 300
	for i := range n {
		method := []string{"GET", "POST", "DELETE"}[i%3]
		fmt.Fprintf(c, "%s /p/key-%d-%s?n=%d HTTP/1.1\r\nHost: host-%d\r\nX-K: value-%d\r\nContent-Length: 0\r\n\r\n", method, i, strings.Repeat("x", i%17), i, i, i)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(all) != n {
		t.Fatalf("%d requests seen, want %d", len(all), n)
	}
	for i, k := range all {
		want := kept{[]string{"GET", "POST", "DELETE"}[i%3], fmt.Sprintf("/p/key-%d-%s", i, strings.Repeat("x", i%17)), fmt.Sprintf("value-%d", i), fmt.Sprintf("host-%d", i), fmt.Sprintf("n=%d", i)}
		if k != want {
			t.Fatalf("request %d kept %+v, now %+v", i, want, k)
		}
	}
}

// TestBodyTooLong: a body longer than MaxBody reaches the handler without
// its bytes and with a length above MaxBody, so that the route answers
// its own 413, declared or chunked.
func TestBodyTooLong(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > 100 {
			n, _ := io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Seen", fmt.Sprint(r.ContentLength, " ", n))
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	_, fast := both(t, h, Config{MaxBody: 101})
	for _, raw := range []string{
		"POST /j HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\n" + strings.Repeat("x", 5000),
		"POST /j HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n" + strings.Repeat("y", 1000) + "\r\n0\r\n\r\n",
	} {
		a := ask(t, fast, raw)
		if a.status != http.StatusRequestEntityTooLarge || !strings.HasSuffix(a.headers["X-Seen"], " 0") {
			t.Errorf("%.60q: %d %v, want 413 with no body read", raw, a.status, a.headers)
		}
	}
	if a := ask(t, fast, "POST /j HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n"+strings.Repeat("z", 100)); a.status != http.StatusAccepted {
		t.Errorf("a body of 100 bytes: %d, want 202", a.status)
	}
	// Told to wait for a 100 Continue, the client is answered at once
	// instead, its body never asked for.
	c, err := net.Dial("tcp", fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /j HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 413") {
		t.Errorf("Expect: 100-continue with 5000 bytes: %q %v, want a 413 at once", line, err)
	}
	// A client that stalls mid-body gets the answer first, not after the
	// read timeout.
	c2, err := net.Dial("tcp", fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "POST /j HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\n"+strings.Repeat("x", 10)) // less than the bound, and than fasthttp's 8 KiB read ahead
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if line, err := bufio.NewReader(c2).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 413") || time.Since(start) > 5*time.Second {
		t.Errorf("a stalled 5000-byte body: %q %v after %v, want a 413 at once", line, err, time.Since(start))
	}
}

// TestTooLongBodyReadFails: a route that reads the body of a request
// longer than MaxBody, rather than its length, gets http.MaxBytesReader's
// error, never an empty body.
func TestTooLongBodyReadFails(t *testing.T) {
	_, fast := both(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b [1]byte
		n, err := io.ReadFull(r.Body, b[:])
		var tooBig *http.MaxBytesError
		if n != 0 || !errors.As(err, &tooBig) {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	}), Config{MaxBody: 10})
	if a := ask(t, fast, "DELETE /v1/dead HTTP/1.1\r\nHost: h\r\nContent-Length: 50\r\n\r\n"+strings.Repeat("{", 50)); a.status != http.StatusRequestEntityTooLarge {
		t.Errorf("reading a 50-byte body over a 10-byte bound: %d, want the read to fail", a.status)
	}
}

// TestHeaderTimeout: a client that sends part of a request and stops is
// cut off after the header timeout, not before.
func TestHeaderTimeout(t *testing.T) {
	_, fast := both(t, http.HandlerFunc(echo), Config{MaxBody: 100, ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: time.Minute, IdleTimeout: time.Minute})
	c, err := net.Dial("tcp", fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: ")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, c) // until the server closes
	if took := time.Since(start); took < 250*time.Millisecond || took > 8*time.Second {
		t.Errorf("cut off after %v, want about 300ms", took)
	}
}

// TestContextEndsWithServer: a request's context is the Config's.
func TestContextEndsWithServer(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	seen := make(chan context.Context, 1)
	_, fast := both(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Context() }), Config{Context: ctx, MaxBody: 10})
	ask(t, fast, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	rc := <-seen
	cancel()
	select {
	case <-rc.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the request's context did not end with the server's")
	}
}

// FuzzAsNetHTTP sends a request made of the fuzzer's path, header value
// and body to both servers: where both take it, the handler saw the same
// request; fastserve never takes what net/http refuses.
func FuzzAsNetHTTP(f *testing.F) {
	f.Add("/v1/jobs/p/k", "v", "payload")
	f.Add("/v1/jobs/p/a%2Fb", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "")
	f.Add("/x?y=%20&z", "a\tb", "chunk")
	f.Add("/%E2%82%AC/..", "", "\x00\xff")
	std, fast := both(f, http.HandlerFunc(echo), Config{MaxBody: 1 << 20})
	f.Fuzz(func(t *testing.T, path, value, body string) {
		if strings.ContainsAny(path, "\r\n ") || strings.ContainsAny(value, "\r\n") {
			return // not one request line, not one header
		}
		raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: h\r\nX-V: %s\r\nContent-Length: %d\r\n\r\n%s", path, value, len(body), body)
		a, b := ask(t, std, raw), ask(t, fast, raw)
		if a.status >= 400 && b.status < 400 {
			t.Fatalf("%q: net/http %d, fastserve takes it: %d %s", raw, a.status, b.status, b.body)
		}
		if a.status == http.StatusOK && b.status == http.StatusOK && a.body != b.body {
			t.Fatalf("%q: the handler saw\n net/http  %s\n fastserve %s", raw, a.body, b.body)
		}
	})
}

// TestBodyCutShort: a body shorter than its declared length, the client
// done sending, is a 400 that says so, not a job of what came.
func TestBodyCutShort(t *testing.T) {
	seen := false
	_, fast := both(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = true }), Config{MaxBody: 100})
	c, err := net.Dial("tcp", fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /j HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "reading body: unexpected EOF") || seen {
		t.Errorf("%d %s (handler called: %v), want 400 reading body, the handler not called", res.StatusCode, body, seen)
	}
}

// TestRefusedBeforeTheRoute: what net/http refuses before a handler runs
// is refused here too, saying why without echoing the request (a token in
// it included), and a transfer coding other than chunked is refused and
// closes the connection: what follows it is never served as a request of
// its own (fasthttp reads "identity" as no coding, and the request as
// bodiless: caught here).
func TestRefusedBeforeTheRoute(t *testing.T) {
	served := make(chan string, 10)
	_, fast := both(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served <- r.URL.Path }), Config{MaxBody: 100})
	for _, c := range []struct {
		raw  string
		code int
	}{
		{"POST /j HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n", http.StatusNotImplemented},
		{"GET /x HTTP/1.1\r\nAuthorization: Bearer s3cr3t-token\r\n\r\n", http.StatusBadRequest},
		{"GET /x HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer s3cr3t-token\x01\r\n\r\n", http.StatusBadRequest},
		{"GET /v1/policies\r\nHost: h\r\nAuthorization: Bearer s3cr3t-token\r\n\r\n", http.StatusBadRequest},
		{"POST /j HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\nPOST /smuggled HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc", http.StatusNotImplemented},
		{"POST /j HTTP/1.1\r\nHost: h\r\nTRANSFER-ENCODING: Identity\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n", http.StatusNotImplemented},
	} {
		a := ask(t, fast, c.raw)
		if a.status != c.code || strings.Contains(a.body, "s3cr3t") || !strings.Contains(a.body, "detail") {
			t.Errorf("%.50q: %d %s, want %d with a detail and no token", c.raw, a.status, a.body, c.code)
		}
	}
	select {
	case p := <-served:
		t.Errorf("%s was served", p)
	default:
	}
}

// TestHeadKeepsLength: a HEAD's answer carries the length its handler set
// (http.ServeContent's way) or the length of what it wrote.
func TestHeadKeepsLength(t *testing.T) {
	std, fast := both(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/set" {
			w.Header().Set("Content-Length", "6497")
			w.WriteHeader(http.StatusOK)
			return
		}
		io.WriteString(w, "thirty-one bytes of a body here")
	}), Config{MaxBody: 100})
	for _, p := range []string{"/set", "/written"} {
		raw := "HEAD " + p + " HTTP/1.1\r\nHost: h\r\n\r\n"
		a, b := ask(t, std, raw), ask(t, fast, raw)
		if a.headers["Content-Length"] != b.headers["Content-Length"] || b.headers["Content-Length"] == "" {
			t.Errorf("HEAD %s: net/http Content-Length %q, fastserve %q", p, a.headers["Content-Length"], b.headers["Content-Length"])
		}
	}
}
