// Package fastserve serves the shaper's http.Handler over fasthttp's
// HTTP/1.1 server: the same handlers, routes and answers, with the cost of
// each request's reading and writing cut.
//
// net/http spends on a small request more than the shaper's own work on a
// 429: its header map is cloned and sorted to be written, three read
// deadlines move a timer, a goroutine waits on every connection in the
// background, and the request is parsed into maps of its own. fasthttp
// parses into buffers it reuses. Each request is handed to the handler as
// an *http.Request built here, synchronously, with every string copied out
// of fasthttp's buffers (they are reused when the handler returns, and the
// shaper keeps keys, ids and headers), and its answer is copied back: the
// handler cannot tell the difference.
//
// What net/http gave that this does not: a request's context is not
// cancelled when its client goes (none of the shaper's handlers waits on
// one), and there is no Flush or Hijack (none streams).
package fastserve

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

// Config is what Serve needs beside the handler.
type Config struct {
	// Context is every request's context: cancelled when the server stops.
	Context context.Context
	// MaxBody is the largest request body read; a longer one is handed to
	// the handler without it, with its declared length, so that the route
	// answers its own 413.
	MaxBody int
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout as net/http's.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
}

// readBuffer bounds a request's line and header (a 10 KB key escaped is
// 30 KB); it is each open connection's read buffer.
const readBuffer = 64 << 10

// Server serves an http.Handler over fasthttp.
type Server struct {
	srv  *fasthttp.Server
	h    http.Handler
	cfg  Config
	base *http.Request // empty but for its context, Config.Context
}

// New returns a Server of h.
func New(h http.Handler, cfg Config) *Server {
	s := &Server{h: h, cfg: cfg, base: (&http.Request{}).WithContext(cmp.Or[context.Context](cfg.Context, context.Background()))}
	s.srv = &fasthttp.Server{
		Handler:                      s.serve,
		ErrorHandler:                 s.failed,
		ExpectHandler:                s.expect,
		MaxRequestBodySize:           cfg.MaxBody,
		StreamRequestBody:            true, // a longer or chunked body is read by serve
		ReadBufferSize:               readBuffer,
		ReadTimeout:                  cfg.ReadTimeout,
		IdleTimeout:                  cfg.IdleTimeout,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		SecureErrorLogMessage:        true, // errors without the request's bytes
		CloseOnShutdown:              true,
		Logger:                       quiet{},
	}
	// fasthttp's ReadTimeout bounds a request's line and header, from its
	// first byte; once the header is in, the body gets the rest of
	// ReadTimeout.
	//
	// A body declared longer than MaxBody is read no further than its
	// first byte before serve runs (fasthttp reads up to 8 KiB of a body
	// ahead), so that a client waiting for an early answer gets its 413.
	bodyTimeout := time.Duration(0)
	if cfg.ReadHeaderTimeout > 0 && cfg.ReadHeaderTimeout < cfg.ReadTimeout {
		bodyTimeout = cfg.ReadTimeout
		s.srv.ReadTimeout = cfg.ReadHeaderTimeout
	}
	s.srv.HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		rc := fasthttp.RequestConfig{ReadTimeout: bodyTimeout}
		if h.ContentLength() > cfg.MaxBody {
			rc.MaxRequestBodySize = 1
		}
		return rc
	}
	return s
}

// Serve accepts connections on ln until Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(ln) }

// Shutdown stops accepting and waits for the requests being served.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.ShutdownWithContext(ctx) }

// Close stops the server at once.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return s.srv.ShutdownWithContext(ctx)
}

// serve hands ctx's request to the handler and writes its answer.
func (s *Server) serve(ctx *fasthttp.RequestCtx) {
	var body []byte
	tooLong := false
	if ctx.Request.IsBodyStream() {
		// With StreamRequestBody every body is a stream: read here,
		// bounded (PostBody would read any length whole).
		var err error
		body, tooLong, err = readAtMost(ctx.RequestBodyStream(), ctx.Request.Header.ContentLength(), s.cfg.MaxBody)
		if err != nil {
			writeProblem(ctx, http.StatusBadRequest, "reading body: "+err.Error())
			return
		}
	} else {
		body = ctx.PostBody()
	}
	if identityCoded(&ctx.Request.Header) {
		writeProblem(ctx, http.StatusNotImplemented, codingUnsupported)
		return
	}
	s.handle(ctx, body, tooLong)
	if tooLong {
		// As net/http does: the answer goes first, saying the connection
		// closes; then what the client is still sending is read and
		// dropped, for a while and up to a bound, so that it reads the
		// answer rather than a reset connection; then it closes. The
		// answer is written here, by hand: fasthttp would close a
		// connection whose answer says so at once.
		ctx.SetConnectionClose()
		ctx.Response.SkipBody = ctx.IsHead()
		var answer bytes.Buffer
		bw := bufio.NewWriter(&answer)
		if ctx.Response.Write(bw) != nil || bw.Flush() != nil {
			return // fasthttp writes it, and closes
		}
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) {
			c.SetDeadline(time.Now().Add(drainFor))
			if _, err := c.Write(answer.Bytes()); err == nil {
				io.CopyN(io.Discard, c, drainAtMost)
			}
		})
	}
}

// expect answers a request that asks to be told to send its body (Expect:
// 100-continue): one declared longer than MaxBody is answered by its
// route at once, without its body, as net/http does; fasthttp then closes
// the connection. Any other is told to go on.
func (s *Server) expect(ctx *fasthttp.RequestCtx) int {
	if n := ctx.Request.Header.ContentLength(); n <= s.cfg.MaxBody {
		return fasthttp.StatusContinue
	}
	return s.handle(ctx, nil, true)
}

// handle builds ctx's request, with body (tooLong: without the body that
// was too long), hands it to the handler, and returns the answer's status.
func (s *Server) handle(ctx *fasthttp.RequestCtx, body []byte, tooLong bool) int {
	r, err := s.request(ctx, body, tooLong)
	if err != nil {
		writeProblem(ctx, http.StatusBadRequest, "bad request: "+err.Error())
		return http.StatusBadRequest
	}
	w := getWriter(ctx)
	defer putWriter(w)
	s.h.ServeHTTP(w, r)
	w.finish()
	return w.code
}

// drainAtMost and drainFor bound what serve reads and drops of a refused
// body, and for how long.
const (
	drainAtMost = 64 << 20
	drainFor    = time.Second
)

// tooLongBody is the body of a request longer than MaxBody: reading it fails
// as http.MaxBytesReader's does, so that a route that reads its body
// rather than its length refuses it too.
type tooLongBody struct{ limit int64 }

func (b tooLongBody) Read([]byte) (int, error) { return 0, &http.MaxBytesError{Limit: b.limit} }
func (tooLongBody) Close() error               { return nil }

// readAtMost reads r, of length n (negative: chunked), to its end when it
// holds at most limit bytes; longer, it stops there and says so.
func readAtMost(r io.Reader, n, limit int) ([]byte, bool, error) {
	if n > limit {
		return nil, true, nil
	}
	if n >= 0 {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, false, err
		}
		return b, false, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, false, err
	}
	if len(b) > limit {
		return nil, true, nil
	}
	return b, false, nil
}

// failed answers a request fasthttp could not read, as net/http would:
// 431 for a request line and header longer than the read buffer, 400 for
// anything else.
func (s *Server) failed(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		writeProblem(ctx, http.StatusRequestHeaderFieldsTooLarge, "request line and header longer than "+strconv.Itoa(readBuffer>>10)+" KiB")
		return
	}
	if errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding) {
		writeProblem(ctx, http.StatusNotImplemented, codingUnsupported)
		return
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		writeProblem(ctx, http.StatusBadRequest, "reading body: unexpected EOF")
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		writeProblem(ctx, http.StatusBadRequest, "the request was not read within the server's timeout")
		return
	}
	// fasthttp's other errors quote what they read, which may hold a token:
	// none is passed on.
	writeProblem(ctx, http.StatusBadRequest, "bad request: the request line or a header does not parse (lines end in CRLF; header names are tokens, values printable)")
}

// request builds the *http.Request of ctx, every string copied, with
// body; tooLong: the body was longer than MaxBody, and ContentLength says
// so.
func (s *Server) request(ctx *fasthttp.RequestCtx, body []byte, tooLong bool) (*http.Request, error) {
	uri := string(ctx.RequestURI())
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, err
	}
	// A copy of base carries the context: one allocation, where
	// WithContext would copy the request a second time.
	r := new(http.Request)
	*r = *s.base
	r.Method = method(ctx.Method())
	r.URL, r.RequestURI = u, uri
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.Header = make(http.Header, ctx.Request.Header.Len())
	r.Host = string(ctx.Host())
	r.RemoteAddr = ctx.RemoteAddr().String()
	r.Body = http.NoBody
	if !ctx.Request.Header.IsHTTP11() {
		r.Proto, r.ProtoMinor = "HTTP/1.0", 0
	}
	values := make([]string, 0, ctx.Request.Header.Len()) // the first value of each name
	for k, v := range ctx.Request.Header.All() {
		// net/http refuses what fasthttp lets through.
		if !httpguts.ValidHeaderFieldName(string(k)) || !httpguts.ValidHeaderFieldValue(string(v)) {
			return nil, errors.New("invalid header field")
		}
		key := headerName(k)
		switch key {
		case "Host", "Transfer-Encoding":
			continue
		case "Connection":
			if r.ProtoMinor == 0 && string(v) == "close" {
				continue // fasthttp's own, for HTTP/1.0
			}
		}
		if vv, ok := r.Header[key]; ok {
			r.Header[key] = append(vv, string(v))
			continue
		}
		values = append(values, string(v))
		r.Header[key] = values[len(values)-1 : len(values) : len(values)]
	}
	switch {
	case tooLong:
		r.ContentLength = int64(s.cfg.MaxBody) + 1
		if n := ctx.Request.Header.ContentLength(); n > 0 {
			r.ContentLength = int64(n)
		}
		r.Body = tooLongBody{int64(s.cfg.MaxBody)}
	case len(body) > 0:
		r.ContentLength = int64(len(body))
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return r, nil
}

// codingUnsupported is the detail of a 501 for a transfer coding other
// than chunked, as net/http refuses one.
const codingUnsupported = "unsupported transfer coding: send a body chunked or with a Content-Length"

// identityCoded reports whether a request fasthttp read as bodiless came
// with a Transfer-Encoding (fasthttp drops one of "identity"): what
// follows its header would otherwise be read as a request of its own.
// Only a request without a length or chunks is looked at.
func identityCoded(h *fasthttp.RequestHeader) bool {
	if h.ContentLength() > 0 || h.ContentLength() == -1 {
		return false
	}
	return bytes.Contains(bytes.ToLower(h.RawHeaders()), []byte("transfer-encoding:"))
}

// headerName returns k in net/http's canonical form, the common names
// without a copy.
func headerName(k []byte) string {
	switch string(k) {
	case "Host", "host":
		return "Host"
	case "Content-Type", "content-type":
		return "Content-Type"
	case "Content-Length", "content-length":
		return "Content-Length"
	case "User-Agent", "user-agent":
		return "User-Agent"
	case "Accept", "accept":
		return "Accept"
	case "Accept-Encoding", "accept-encoding":
		return "Accept-Encoding"
	case "Authorization", "authorization":
		return "Authorization"
	case "Connection", "connection":
		return "Connection"
	case "Idempotency-Key", "idempotency-key":
		return "Idempotency-Key"
	case "Traceparent", "traceparent":
		return "Traceparent"
	case "Tracestate", "tracestate":
		return "Tracestate"
	}
	return http.CanonicalHeaderKey(string(k))
}

// method returns m as a string, the common methods without a copy.
func method(m []byte) string {
	switch string(m) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPatch:
		return http.MethodPatch
	}
	return string(m)
}

// quiet drops fasthttp's own log lines (a client's broken connection):
// the shaper logs what it answers.
type quiet struct{}

func (quiet) Printf(string, ...any) {}
