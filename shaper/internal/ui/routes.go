package ui

import (
	"embed"
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

//go:embed assets
var assets embed.FS

// contentSecurity lets the page load only its own files and talk only to
// its own origin.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Routes adds the operator page and its data to mux:
//
//	GET /                  a redirect to the page, where a browser lands first
//	GET /ui/               the page (embedded HTML, CSS and JavaScript)
//	GET /v1/ui/access      whether the page needs a token (open)
//	GET /v1/ui/series?since=   every policy's series after since (unix ms)
//
// The series are behind admin. The page's files hold no data: with a
// token configured (tokenSet) anyone may load them and the page asks for
// the token; without one they are behind admin too (loopback clients only).
func (s *Series) Routes(mux *httpapi.Mux, admin httpapi.Guard, tokenSet bool) {
	page := admin
	if tokenSet {
		page = httpapi.Open
	}
	files, _ := fs.Sub(assets, "assets")
	static := http.StripPrefix("/ui/", http.FileServerFS(files))
	mux.HandleFunc("GET /ui/", page(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurity)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if name := strings.TrimPrefix(r.URL.Path, "/ui/"); name != "" {
			if _, err := fs.Stat(files, name); err != nil {
				// A problem, as every other 404 (the file server's was
				// text/plain).
				httpapi.Error(w, http.StatusNotFound, "no file "+httpapi.Quote(name)+" of the operator page (it is /ui/)")
				return
			}
		}
		static.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound) // not permanent: the root may serve more one day
	})
	mux.HandleFunc("GET /v1/ui/access", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]bool{"token": tokenSet})
	})
	mux.HandleFunc("GET /v1/ui/series", admin(s.handleSeries))
}

// handleSeries serves GET /v1/ui/series?since=: the samples after since
// (unix milliseconds; all of the window without it).
func (s *Series) handleSeries(w http.ResponseWriter, r *http.Request) {
	if !httpapi.Query(w, r, "since") {
		return
	}
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			httpapi.Error(w, http.StatusBadRequest, "since "+httpapi.Quote(v)+": want unix milliseconds")
			return
		}
		since = time.UnixMilli(ms)
	}
	now := time.Now()
	s.watched.Store(now.UnixNano())
	httpapi.WriteJSON(w, http.StatusOK, s.snapshot(now, since))
}

// seriesAnswer is the body of GET /v1/ui/series.
type seriesAnswer struct {
	Now        int64          `json:"now"` // unix ms
	IntervalMs int64          `json:"interval_ms"`
	WindowMs   int64          `json:"window_ms"`
	Policies   []policyAnswer `json:"policies"`
}

type policyAnswer struct {
	Name string `json:"name"`
	// File is the policy's tunable settings as its file says.
	File *tunables `json:"file,omitempty"`
	// Deepest are the deepest keys, read at DeepestAt (unix ms, 0 when
	// not yet read).
	Deepest   []KeyDepth `json:"deepest"`
	DeepestAt int64      `json:"deepest_at"`
	Samples   columns    `json:"samples"`
}

type tunables struct {
	Outflow  policies.Rate     `json:"outflow"`
	Queue    int               `json:"queue"`
	Overflow policies.Overflow `json:"overflow"`
	Total    policies.Rate     `json:"total"`
}

// columns holds samples column by column, oldest first: T in unix ms,
// rates per second, durations in milliseconds, null where unknown.
type columns struct {
	T           []int64  `json:"t"`
	Admitted    []number `json:"admitted"`
	Rejected    []number `json:"rejected"`
	Deferred    []number `json:"deferred"`
	Delivered   []number `json:"delivered"`
	Failed      []number `json:"failed"`
	Queued      []int64  `json:"queued"`
	DeferQueued []int64  `json:"deferred_queued"`
	InQueueP50  []number `json:"in_queue_p50_ms"`
	InQueueP99  []number `json:"in_queue_p99_ms"`
	LatenessP99 []number `json:"lateness_p99_ms"`
	Rate        []number `json:"rate"` // the adaptive outflow's effective rate (null: none)
}

// number is a figure written with at most three decimals, null for NaN.
type number float64

// MarshalJSON implements json.Marshaler.
func (n number) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, math.Round(float64(n)*1000)/1000, 'f', -1, 64), nil
}

// snapshot returns every policy's samples taken after since, sorted by
// policy name.
func (s *Series) snapshot(now, since time.Time) seriesAnswer {
	out := seriesAnswer{
		Now:        now.UnixMilli(),
		IntervalMs: s.cfg.Interval.Milliseconds(),
		WindowMs:   s.cfg.Window.Milliseconds(),
		Policies:   []policyAnswer{},
	}
	for _, name := range s.names() {
		p := policyAnswer{Name: name}
		if f, ok := s.src.File(name); ok {
			p.File = &tunables{Outflow: f.Outflow, Queue: f.Queue, Overflow: f.Overflow, Total: f.Total}
		}
		s.mu.Lock()
		l := s.lines[name]
		if l == nil || l.n == 0 {
			s.mu.Unlock()
			continue // not sampled yet, or forgotten meanwhile
		}
		p.Deepest = append([]KeyDepth{}, l.deepest...)
		if !l.deepestAt.IsZero() {
			p.DeepestAt = l.deepestAt.UnixMilli()
		}
		c := &p.Samples
		*c = columns{T: []int64{}, Admitted: []number{}, Rejected: []number{}, Deferred: []number{},
			Delivered: []number{}, Failed: []number{}, Queued: []int64{}, DeferQueued: []int64{},
			InQueueP50: []number{}, InQueueP99: []number{}, LatenessP99: []number{}, Rate: []number{}}
		for i := range l.n {
			sm := &l.ring[(l.next-l.n+i+len(l.ring))%len(l.ring)]
			if !sm.at.After(since) {
				continue
			}
			c.T = append(c.T, sm.at.UnixMilli())
			c.Admitted = append(c.Admitted, number(sm.admitted))
			c.Rejected = append(c.Rejected, number(sm.rejected))
			c.Deferred = append(c.Deferred, number(sm.deferred))
			c.Delivered = append(c.Delivered, number(sm.delivered))
			c.Failed = append(c.Failed, number(sm.failed))
			c.Queued = append(c.Queued, sm.queued)
			c.DeferQueued = append(c.DeferQueued, sm.deferQueued)
			c.InQueueP50 = append(c.InQueueP50, number(sm.inQueueP50))
			c.InQueueP99 = append(c.InQueueP99, number(sm.inQueueP99))
			c.LatenessP99 = append(c.LatenessP99, number(sm.latenessP99))
			c.Rate = append(c.Rate, number(sm.rate))
		}
		s.mu.Unlock()
		out.Policies = append(out.Policies, p)
	}
	return out
}
