package shaper_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// hook is a webhook downstream recording deliveries per key.
type hook struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string][]hookHit
	// answer, when set, decides the status and Retry-After of a delivery.
	answer atomic.Pointer[func(key string) (int, string)]
}

type hookHit struct {
	id, body          string
	trace, tracestate string
	replayOf          string
	at                time.Time
}

func newHook(t *testing.T) *hook {
	h := &hook{got: map[string][]hookHit{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(queue.HeaderKey)
		if f := h.answer.Load(); f != nil {
			if code, ra := (*f)(key); code != http.StatusOK {
				if ra != "" {
					w.Header().Set("Retry-After", ra)
				}
				w.WriteHeader(code)
				return
			}
		}
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		h.mu.Lock()
		h.got[key] = append(h.got[key], hookHit{id: r.Header.Get(queue.HeaderJobID), body: b.String(),
			trace: r.Header.Get("traceparent"), tracestate: r.Header.Get("tracestate"), replayOf: r.Header.Get(queue.HeaderReplayOf), at: time.Now()})
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) set(f func(key string) (int, string)) { h.answer.Store(&f) }

func (h *hook) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, hs := range h.got {
		n += len(hs)
	}
	return n
}

func (h *hook) hits(key string) []hookHit {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookHit(nil), h.got[key]...)
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
