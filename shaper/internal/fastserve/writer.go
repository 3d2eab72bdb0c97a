package fastserve

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// writer is the http.ResponseWriter of one request: the header is copied
// out when the status is written, as net/http snapshots it.
type writer struct {
	ctx  *fasthttp.RequestCtx
	h    http.Header
	code int
}

// writers keeps writers and their header maps between requests: a
// handler does not touch its ResponseWriter once it has returned.
var writers = sync.Pool{New: func() any { return &writer{h: make(http.Header, 8)} }}

func getWriter(ctx *fasthttp.RequestCtx) *writer {
	w := writers.Get().(*writer)
	w.ctx, w.code = ctx, 0
	return w
}

func putWriter(w *writer) {
	clear(w.h)
	w.ctx = nil
	writers.Put(w)
}

func (w *writer) Header() http.Header { return w.h }

func (w *writer) WriteHeader(code int) {
	if w.code != 0 || code < 200 {
		return
	}
	w.code = code
	w.ctx.SetStatusCode(code)
	rh := &w.ctx.Response.Header
	for k, vv := range w.h {
		switch k {
		case "Content-Length":
			// fasthttp counts the body; a HEAD's answer has none, and
			// keeps the length its handler gave (as http.ServeContent's).
			if n, err := strconv.Atoi(firstOf(vv)); err == nil && w.ctx.IsHead() {
				rh.SetContentLength(n)
			}
			continue
		case "Transfer-Encoding", "Connection", "Date":
			continue
		}
		for i, v := range vv {
			if i == 0 {
				rh.Set(k, v)
			} else {
				rh.Add(k, v)
			}
		}
	}
}

func firstOf(vv []string) string {
	if len(vv) == 0 {
		return ""
	}
	return vv[0]
}

func (w *writer) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.code) {
		return len(p), nil
	}
	// A HEAD's body is kept too: fasthttp sends its length, not its bytes.
	w.ctx.Response.AppendBody(p)
	return len(p), nil
}

// finish writes the status of a handler that wrote nothing, and the
// Content-Type net/http would have sniffed.
func (w *writer) finish() {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if body := w.ctx.Response.Body(); len(body) > 0 && len(w.ctx.Response.Header.ContentType()) == 0 {
		w.ctx.Response.Header.SetContentType(http.DetectContentType(body[:min(len(body), 512)]))
	}
}

// bodyAllowed is whether a code's answer may have a body.
func bodyAllowed(code int) bool {
	return code != http.StatusNoContent && code != http.StatusNotModified
}

// writeProblem answers code with detail as the API's problems are.
func writeProblem(ctx *fasthttp.RequestCtx, code int, detail string) {
	w := getWriter(ctx)
	defer putWriter(w)
	httpapi.WriteProblem(w, httpapi.Problem{Status: code, Detail: detail}, 0)
	w.finish()
	ctx.SetConnectionClose()
}
