package shaper

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// DefaultStartTimeout bounds how long a Shaper keeps retrying to create or
// bind its streams and buckets at start.
const DefaultStartTimeout = 2 * time.Minute

// Start-up retries: the first pause, the longest, and the bounds of the
// first try and of any. A try's bound doubles from the first: creating a
// store that another shaper creates at the same moment can hang without an
// answer, and is then found made by the next try, so the first gives up
// early; a slow cluster gets longer tries.
const (
	startBackoff    = 250 * time.Millisecond
	startMaxBackoff = 5 * time.Second
	startFirstTry   = 2 * time.Second
	startTry        = 10 * time.Second
)

// jsReplicasNotSupported is nats-server's error code for a stream of more
// than one replica asked of a server that is not clustered
// (JSStreamReplicasNotSupportedErr).
const jsReplicasNotSupported = 10074

// jsClusterNoPeers is nats-server's error code for a stream it cannot
// place: fewer JetStream servers up than its replicas (JSClusterNoPeersErrF).
const jsClusterNoPeers = 10005

// errStartDeadline ends a start-up that took longer than StartTimeout.
var errStartDeadline = errors.New("the start-up deadline passed")

// startup is what a starting Shaper shows on /readyz: the step it is at.
type startup struct{ step atomic.Pointer[string] }

func (st *startup) at(what string) { st.step.Store(&what) }

func (st *startup) String() string {
	if p := st.step.Load(); p != nil {
		return *p
	}
	return "starting"
}

// retry runs open until it succeeds, retrying transient JetStream failures
// with a doubling backoff (logged) until ctx ends or the start-up deadline
// passes. Shapers started together on a fresh cluster race to create the
// same streams and buckets; creating a new R3 store concurrently can hang
// until the request's deadline, and the retry finds it made.
func (s *Shaper) retry(ctx context.Context, what string, open func(context.Context) error) error {
	s.starting.at(what)
	wait, bound := startBackoff, startFirstTry
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, bound)
		err := open(tctx)
		cancel()
		if err == nil {
			if attempt > 1 {
				s.log.Info("start-up: done after retrying", "step", what, "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return s.endedStart(ctx, what, attempt, err)
		}
		if !transient(err) {
			return s.refused(err)
		}
		attrs := []any{"step", what, "attempt", attempt, "retry_in", wait, "err", err}
		if queue.StorageFull(err) {
			// Retried all the same: another shaper's drain may free room.
			s.starting.at(what + ": " + storageFullHint)
			attrs = append(attrs, "hint", storageFullHint)
		}
		s.log.Warn("start-up: failed, retrying", attrs...)
		select {
		case <-ctx.Done():
			return s.endedStart(ctx, what, attempt, err)
		case <-time.After(wait):
		}
		wait, bound = min(2*wait, startMaxBackoff), min(2*bound, startTry)
	}
}

// moreStorage is the remedy of a store too full for the shaper's own
// writes; storageFullHint says it of a start-up step that waits for it.
const (
	moreStorage     = "give JetStream more storage (max_file_store; for the embedded store a larger --max-store, or more disk under --data)"
	storageFullHint = "JetStream's storage is full and refuses every write: " + moreStorage
)

// endedStart is the error of a start-up step whose retries ctx ended: the
// start-up deadline, or Run stopped before it served.
func (s *Shaper) endedStart(ctx context.Context, what string, attempts int, last error) error {
	hint := ""
	if errors.Is(last, nats.ErrNoResponders) || errors.Is(last, jetstream.ErrJetStreamNotEnabled) {
		hint = "; no JetStream answered: is the NATS server run with JetStream on (nats-server -js) and, in a cluster, are most of its nodes up?"
	}
	if cause := context.Cause(ctx); !errors.Is(cause, errStartDeadline) {
		return fmt.Errorf("stopped before serving, while %s (%d attempts; the last: %w%s)", what, attempts, last, hint)
	}
	return fmt.Errorf("%w (gave up after %d attempts: %v%s)", last, attempts, errStartDeadline, hint)
}

// refused is the error of a start-up step the server refused for good: a
// replica count a single server cannot keep is a bad setting.
func (s *Shaper) refused(err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jsReplicasNotSupported {
		return &ConfigError{Field: "Replicas", Err: fmt.Errorf("%d: the NATS server is not clustered, and keeps one replica of a stream (use 1, or a cluster of at least %d JetStream servers): %w",
			s.cfg.Replicas, s.cfg.Replicas, err)}
	}
	if errors.As(err, &api) && api.ErrorCode == jsClusterNoPeers && s.cfg.Replicas > 1 {
		return &ConfigError{Field: "Replicas", Err: fmt.Errorf("%d: the NATS cluster cannot place a stream of %d replicas: it has fewer JetStream servers up (use at most as many as it has): %w",
			s.cfg.Replicas, s.cfg.Replicas, err)}
	}
	return err
}

// transient reports whether a failure to create or bind a store may pass:
// timeouts, no responders, a cluster electing or out of resources for now,
// a concurrent creation. Refusals of the request itself are not.
func transient(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		// A 500 may pass, but for more replicas than a single server
		// keeps: that one never does.
		return api.Code >= 500 && api.ErrorCode != jsReplicasNotSupported || api.ErrorCode == jetstream.JSErrCodeStreamNameInUse
	}
	var cfg *ConfigError
	if errors.As(err, &cfg) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

// handler serves the full API once the Shaper is open; until then
// /healthz, and /readyz and every other route answer 503 with the start-up
// step.
type handler struct {
	s    *Shaper
	full atomic.Pointer[http.Handler]
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if full := h.full.Load(); full != nil {
		(*full).ServeHTTP(w, r)
		return
	}
	switch r.URL.Path {
	case "/healthz":
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "uptime_s": int(time.Since(h.s.started).Seconds())})
	case "/readyz":
		httpapi.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting: " + h.s.starting.String()})
	default:
		httpapi.WriteProblem(w, httpapi.Problem{Status: http.StatusServiceUnavailable, Detail: "the shaper is starting: " + h.s.starting.String()}, time.Second)
	}
}
