package shaper

import (
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// Handler returns the Shaper's HTTP API, once Run has opened its parts
// (after Ready). Admin routes (tuning, reload, deferred jobs, dead letters,
// profiles) need Config.AdminToken as a bearer token, or come from a
// loopback client when there is none; submission and job status need
// Config.SubmitToken when it is set:
//
//	POST /v1/jobs/{policy}/{key}   submit a job (body = payload)
//	GET  /v1/jobs/{id}             a job's status: queued, deferred, delivered, dead or replayed
//	GET  /v1/policies              every policy with its live figures
//	GET  /v1/policies/{name}       one policy
//	PUT  /v1/policies/{name}       tune a policy live (a JSON merge patch of the fields to change)
//	DELETE /v1/policies/{name}/override   back to the policy file
//	POST /v1/reload                read the policy file again (like SIGHUP)
//	GET  /v1/deferred?policy=&key=&limit=&after=  a page of deferred jobs
//	GET  /v1/dead?policy=&key=&reason=&limit=&after=  a page of dead letters
//	GET  /v1/dead/{policy}/{seq}   one dead letter with its payload
//	POST /v1/dead/replay?policy=&key=&reason=     submit dead letters again
//	DELETE /v1/dead?policy=&key=&reason=          purge dead letters
//	GET  /                         a redirect to the operator page
//	GET  /ui/                      the operator page (admin: see ui.Series.Routes)
//	GET  /v1/ui/series?since=      every policy's figures over the last minutes, for the page
//	GET  /v1/ui/access             whether the page must ask for the admin token (open)
//	GET  /healthz                  the process is alive
//	GET  /readyz                   the Shaper accepts jobs (JetStream reachable and storing, with storage left)
//	GET  /metrics                  the figures in the Prometheus text format
//	GET  /debug/pprof/             net/http/pprof's profiles (admin): the index, heap, goroutine, …,
//	                               cmdline, profile (CPU), symbol, trace
func (s *Shaper) Handler() http.Handler {
	admin := httpapi.Bearer(s.cfg.AdminToken, "this admin route")
	submit := httpapi.Guard(httpapi.Open)
	if s.cfg.SubmitToken != "" {
		submit = httpapi.Bearer(s.cfg.SubmitToken, "submission")
	}
	mux := httpapi.NewMux() // remembers its patterns: docs/api.md is checked against them
	s.ingress.Routes(mux, submit)
	s.policies.routes(mux, s.cluster, admin, s.log)
	s.dead.Routes(mux, admin)
	mux.HandleFunc("GET /v1/deferred", admin(s.handleDeferred))
	s.series.Routes(mux, admin, s.cfg.AdminToken != "")
	// Job status takes the admin token too: an operator looks jobs up.
	jobStatus := httpapi.Guard(httpapi.Open)
	if s.cfg.SubmitToken != "" {
		jobStatus = httpapi.AnyBearer("job status", s.cfg.SubmitToken, s.cfg.AdminToken)
	}
	mux.HandleFunc("GET /v1/jobs/{id}", jobStatus(s.jobs.Handler(s.policies.jobDrain())))
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	mux.HandleFunc("POST /v1/reload", admin(s.handleReload))
	debugRoutes(mux, admin)
	mux.HandleFunc("/", httpapi.NotFound(mux.ServeMux)) // unknown routes and methods: problem details too
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "uptime_s": int(time.Since(s.started).Seconds())})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		storageFull, unanswered := s.storageFull(), s.unanswered()
		switch {
		case !s.serving.Load():
			httpapi.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not serving"})
		case s.nc.Status() != nats.CONNECTED:
			httpapi.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "nats " + s.nc.Status().String()})
		case unanswered != "": // first: nothing is stored, not even the drain's renewals
			httpapi.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": unanswered})
		case storageFull != "":
			httpapi.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": storageFull})
		default:
			httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		}
	})
	return mux
}

// storageFull says why the Shaper does not accept jobs for want of
// JetStream storage, "" when it has not been refused any lately
// (admission.Storage).
func (s *Shaper) storageFull() string {
	since, refusal, full := s.storage.Full(time.Now())
	if !full {
		return ""
	}
	return "storage full: JetStream has refused jobs for want of room since " + since.UTC().Format(time.RFC3339) + " (" + refusal.Error() + ")"
}

// NotStoring begins /readyz's status when JetStream stores nothing this
// shaper writes (unanswered): not even the drain's lease renewals, so its
// drain delivers nothing either.
const NotStoring = "JetStream stores nothing"

// unanswered says why the Shaper does not accept jobs when its NATS
// connection is up but JetStream stores nothing (a cluster without a
// quorum), "" when JetStream answers (cluster.Cluster.Unanswered).
func (s *Shaper) unanswered() string {
	since, last, ok := s.cluster.Unanswered(time.Now())
	if !ok {
		return ""
	}
	if queue.StorageFull(last) {
		// Not a lost quorum: a full store refuses the renewals of the
		// drain's lease too, and the drain, which frees room, stops.
		return NotStoring + ": its storage is full, and no renewal of this shaper's membership or of the drain's lease has been stored since " +
			since.UTC().Format(time.RFC3339) + " (" + last.Error() + "); " + moreStorage + ": the drain resumes once renewals are stored again"
	}
	return NotStoring + ": no renewal of this shaper's membership stored since " + since.UTC().Format(time.RFC3339) +
		" (" + last.Error() + "; are most of the cluster's JetStream servers up?)"
}

// debugRoutes registers net/http/pprof's handlers under /debug/pprof/
// behind guard: the index, which also serves each named profile by its
// name (/debug/pprof/heap, goroutine, allocs, block, mutex, threadcreate),
// and cmdline, profile (CPU, ?seconds=), symbol and trace (?seconds=).
// (Importing net/http/pprof also registers them on http.DefaultServeMux,
// which the shaper never serves.)
func debugRoutes(mux *httpapi.Mux, guard httpapi.Guard) {
	mux.HandleFunc("GET /debug/pprof/", guard(pprof.Index))
	mux.HandleFunc("GET /debug/pprof/cmdline", guard(pprof.Cmdline))
	mux.HandleFunc("GET /debug/pprof/profile", guard(pprof.Profile))
	mux.HandleFunc("GET /debug/pprof/symbol", guard(pprof.Symbol))
	mux.HandleFunc("POST /debug/pprof/symbol", guard(pprof.Symbol))
	mux.HandleFunc("GET /debug/pprof/trace", guard(pprof.Trace))
}
