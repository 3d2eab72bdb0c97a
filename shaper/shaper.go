package shaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
	"github.com/shaper-dev/shaper/shaper/internal/deadletter"
	"github.com/shaper-dev/shaper/shaper/internal/fastserve"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/ingress"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
	"github.com/shaper-dev/shaper/shaper/internal/recording"
	"github.com/shaper-dev/shaper/shaper/internal/ui"
)

// Shaper is the service: HTTP and NATS ingress in front of one bounded queue
// and one drainer per policy. Create it with New and run it with Run. Its
// methods are safe for concurrent use.
//
// A Shaper opens the stores, builds each policy's pipeline
// (shaper/internal/pipeline.New), holds the drain leases, serves reloads,
// health and metrics, and routes to the parts that own their state and
// their routes: the policy table (policies.go: the policies served, live
// changes and status), the ingress, the dead letters, the job records, the
// operator page and the cluster membership (leases, overrides).
type Shaper struct {
	cfg Config
	log *slog.Logger

	policies *table
	ingress  *ingress.Ingress
	metrics  *metrics
	tracer   trace.Tracer // nil unless Config.TracerProvider
	jobs     *jobs.Store
	dead     *deadletter.Store
	cluster  *cluster.Cluster
	series   *ui.Series          // the operator page's figures over the last minutes
	recorder *recording.Recorder // shaper record's requests
	lanes    *lanes              // the direct lane's requests and announcements

	srv      *server.Server        // embedded JetStream, nil with an external one
	nc       *nats.Conn            // nil until Run connects
	js       jetstream.JetStream   // nil until Run connects
	rdb      redis.UniversalClient // admission limiter state, nil without Redis
	lost     chan error            // the NATS connection closed for good while serving
	reloads  chan reloadRequest    // Reload's requests, served by Run
	handler  *handler              // the HTTP API: "starting" until open
	starting startup               // the start-up step, for /readyz
	stopping startup               // the graceful stop's step, for its progress log
	storage  admission.Storage     // JetStream's room, by the stores' answers to jobs: for /readyz
	reserve  queue.Reserve         // JetStream's room kept from jobs for the leases and records

	httpAddr   atomic.Value // string, once listening
	ready      chan struct{}
	serving    atomic.Bool
	started    time.Time
	background sync.WaitGroup // leases, membership, overrides, sweeps
}

// deadCountInterval is how often the dead letters' counts are read again
// from JetStream (for the dead letters other shapers make, replay or purge).
const deadCountInterval = 5 * time.Second

// New checks cfg and returns a Shaper ready to Run. It does no I/O.
func New(cfg Config) (*Shaper, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil {
		return nil, &ConfigError{Field: "HTTPAddr", Err: fmt.Errorf("%q: %w", cfg.HTTPAddr, err)}
	}
	if cfg.AdminToken == "" && !cfg.AdminLoopbackOnly && !httpapi.Loopback(host) {
		return nil, &ConfigError{Field: "AdminToken", Err: fmt.Errorf("the HTTP API listens beyond loopback (%s) and no admin token is set: anyone who can reach it could tune policies and replay or purge dead letters; set an admin token, or allow the admin routes to loopback clients only explicitly", cfg.HTTPAddr)}
	}
	if cfg.NATSURL == "" {
		if _, _, err := embeddedListen(cfg); err != nil {
			return nil, err
		}
	}
	s := &Shaper{
		cfg:      cfg,
		log:      cfg.Logger,
		policies: newTable(cfg.Policies),
		ready:    make(chan struct{}),
		lost:     make(chan error, 1),
		reloads:  make(chan reloadRequest),
	}
	s.lanes = newLanes(s.policies.lane)
	s.policies.changed = s.lanes.announce
	s.handler = &handler{s: s}
	s.series = ui.New(s.policies, ui.Config{})
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer(jobtrace.Scope)
	}
	if s.metrics, err = newMetrics(cfg.Resource, cfg.MetricReaders); err != nil {
		return nil, fmt.Errorf("shaper: metrics: %w", err)
	}
	s.recorder = recording.New(recording.Config{
		Instance: cfg.InstanceID,
		Policies: s.policies.names,
		Logger:   cfg.Logger,
	})
	s.ingress = ingress.New(ingress.Config{
		Gate:     s.policies.gate,
		Policies: s.policies.names,
		Serving:  s.serving.Load,
		Subject:  cfg.SubmitSubject,
		Timeout:  cfg.Timeout,
		Logger:   cfg.Logger,
		Tracer:   s.tracer,
		Meter:    s.metrics.meter,
	})
	if err := s.metrics.observe(s); err != nil {
		return nil, fmt.Errorf("shaper: metrics: %w", err)
	}
	return s, nil
}

// Ready is closed once the Shaper accepts jobs.
func (s *Shaper) Ready() <-chan struct{} { return s.ready }

// HTTPAddr returns the address the HTTP server listens on, once Ready.
func (s *Shaper) HTTPAddr() string {
	a, _ := s.httpAddr.Load().(string)
	return a
}

// NATSURL returns the URL outside clients reach JetStream at, once Ready.
func (s *Shaper) NATSURL() string {
	if s.srv != nil {
		return s.srv.ClientURL()
	}
	return s.cfg.NATSURL
}

// Status returns every policy with its live figures, sorted by name.
func (s *Shaper) Status() []PolicyStatus { return s.policies.status(context.Background()) }

// Depths returns the jobs stored per key in the policy's queue, read from
// JetStream (exact, but one request over every key: for tests and tools).
func (s *Shaper) Depths(ctx context.Context, policy string) map[string]uint64 {
	line := s.policies.line(policy)
	if line == nil {
		return nil
	}
	d, err := line.queue.Depths(ctx)
	if err != nil {
		return nil
	}
	return d
}

// Run starts the Shaper and serves until ctx ends, then shuts down
// gracefully: it stops admitting, finishes the deliveries in flight and
// leaves queued jobs in JetStream. It returns an error when it cannot start.
func (s *Shaper) Run(ctx context.Context) error {
	s.started = time.Now()
	defer s.shutdownMetrics()
	// One shaper per embedded store: a second would deliver every job again.
	// The lock comes first, so that a second shaper on the same data
	// directory names the holder even when it was also given its ports.
	var (
		lock *os.File
		me   holder
	)
	if s.cfg.NATSURL == "" {
		host, _ := os.Hostname()
		me = holder{PID: os.Getpid(), Host: host, HTTP: s.cfg.HTTPAddr, NATS: s.cfg.NATSListen, Started: s.started}
		var err error
		if lock, err = lockDataDir(s.cfg.DataDir, me); err != nil {
			return err
		}
		defer lock.Close()
	}
	// Take the HTTP address next: a taken port must not cost a start-up
	// that drains a moment and then gives up.
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return &ConfigError{Field: "HTTPAddr", Err: fmt.Errorf("listen on %s: %w", s.cfg.HTTPAddr, err)}
	}
	defer ln.Close()
	s.httpAddr.Store(ln.Addr().String())
	// Serve /healthz and /readyz (starting) at once: the full API comes
	// when the streams are open, which may take retries.
	reqCtx, reqCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer reqCancel()
	hs := fastserve.New(s.handler, fastserve.Config{
		Context:           reqCtx,
		MaxBody:           max(cmp.Or(s.cfg.MaxPayload, queue.DefaultMaxPayload), maxPolicyBody), // a job's, or an admin route's
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute, // a job body that trickles in for longer is cut off
		IdleTimeout:       2 * time.Minute,
	})
	httpDone := make(chan error, 1)
	go func() { httpDone <- hs.Serve(ln) }()
	defer hs.Close()
	s.starting.at("connecting to NATS")
	if lock != nil {
		if err := s.connect(ctx); err != nil {
			return err
		}
		me.HTTP, me.NATS = ln.Addr().String(), s.srv.ClientURL()
		writeHolder(lock, me)
	} else if err := s.connect(ctx); err != nil {
		return err
	}
	defer s.disconnect()

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// abort undoes a start-up that got as far as the drainers and leases.
	abort := func(err error) error {
		s.policies.stop(context.Background(), s.log)
		cancel()
		s.background.Wait()
		return err
	}
	if s.rdb, err = connectRedis(s.cfg.RedisURL); err != nil {
		return err
	}
	if s.rdb != nil {
		defer s.rdb.Close()
		if err := s.rdb.Ping(runCtx).Err(); err != nil {
			s.log.Warn("redis unreachable at start: admission limits fail open or closed per policy until it answers", "err", err)
		}
	}
	if err := s.open(ctx, runCtx); err != nil {
		return abort(err)
	}
	full := s.Handler()
	s.handler.full.Store(&full)
	s.starting.at("subscribing to NATS submissions")
	if err := s.ingress.Subscribe(s.nc); err != nil {
		return abort(fmt.Errorf("shaper: nats ingress: %w", err))
	}
	if err := s.recorder.Subscribe(s.nc); err != nil {
		return abort(fmt.Errorf("shaper: recording: %w", err))
	}
	if err := s.lanes.subscribe(s.nc, s.policies.names()); err != nil {
		return abort(fmt.Errorf("shaper: direct lane: %w", err))
	}
	if err := s.answerJobs(s.nc); err != nil {
		return abort(fmt.Errorf("shaper: job status over NATS: %w", err))
	}
	// Ready means answering: a request sent the moment after (a submission,
	// shaper record) found no responders while the server had yet to read
	// the subscriptions.
	if err := s.nc.FlushTimeout(s.cfg.Timeout); err != nil {
		return abort(fmt.Errorf("shaper: nats subscriptions: %w", err))
	}
	s.background.Go(func() { s.recorder.Run(runCtx) })
	s.serving.Store(true)
	s.background.Go(func() { s.readyToDrain(runCtx) })
	close(s.ready)
	s.log.Info("shaper serving", "http", s.HTTPAddr(), "nats", RedactURL(s.NATSURL()), "policies", len(s.policies.names()),
		"operator_page", "http://"+s.HTTPAddr()+"/ui/")

	var runErr error
serving:
	for {
		select {
		case <-ctx.Done():
			break serving
		case err := <-httpDone:
			s.log.Error("http server stopped", "err", err)
			break serving
		case err := <-s.lost:
			s.log.Error("nats connection closed for good: stopping; start the shaper again", "err", err)
			runErr = fmt.Errorf("shaper: nats connection closed: %w", err)
			break serving
		case req := <-s.reloads:
			rep, err := s.reload(runCtx)
			req.reply <- reloadResult{rep, err}
		}
	}

	// Graceful shutdown: stop admitting, let deliveries in flight end. The
	// HTTP server keeps answering meanwhile, as documented: submissions
	// 503 "stopping", /readyz 503 "not serving", and status, metrics and
	// the page what the stop is waiting for; it closes once the drain has
	// stopped, within what is left of the budget (a second at least).
	s.serving.Store(false)
	s.log.Info("shutting down: no new jobs; finishing what is in flight", "timeout", s.cfg.ShutdownTimeout)
	defer s.reportShutdown()()
	deadline := time.Now().Add(s.cfg.ShutdownTimeout)
	var wg sync.WaitGroup
	wg.Go(func() {
		ictx, icancel := context.WithDeadline(context.Background(), deadline)
		defer icancel()
		s.ingress.Stop(ictx)
	})
	dctx, dcancel := context.WithDeadline(context.Background(), deadline)
	defer dcancel()
	s.stopping.at("finishing the deliveries in flight")
	s.policies.stop(dctx, s.log)
	s.stopping.at("releasing the drain leases and the membership")
	cancel() // release the drain leases
	s.background.Wait()
	s.stopping.at("answering for the partitions released until their next holders do")
	s.awaitNextHolders()
	s.stopping.at("closing the HTTP connections and the NATS submissions")
	hctx, hcancel := context.WithTimeout(context.Background(), max(time.Until(deadline), time.Second))
	defer hcancel()
	if err := hs.Shutdown(hctx); err != nil {
		s.log.Warn("http shutdown", "err", err)
		hs.Close()
	}
	wg.Wait()
	s.log.Info("shaper stopped")
	return runErr
}

// awaitNextHolders waits, when other shapers live, until they serve the
// questions about the partitions this shaper released, which it answers
// until then (answers.View.Leave), a third of the lease TTL at most: a
// shaper leaving then leaves no partition unanswered between its exit
// and the take-over, when the others' passive drainers would answer,
// knowing nothing of the cap's slots.
func (s *Shaper) awaitNextHolders() {
	if s.cluster == nil || s.cluster.Shapers() <= 1 {
		return
	}
	deadline := time.Now().Add(s.cfg.LeaseTTL / 3)
	for s.policies.leaving() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// caughtUpWait bounds how long a shaper waits for its watches of the
// queues to catch up before it takes its share of the partitions anyway.
const caughtUpWait = 30 * time.Second

// readyToDrain tells the cluster that this shaper may be given partitions
// (cluster.SetReady) once every policy's watch of its queue has reported
// the jobs stored when it started: a partition handed over to it is then
// delivered at once, not after reading the whole queue.
func (s *Shaper) readyToDrain(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, caughtUpWait)
	defer cancel()
	for _, line := range s.policies.snapshot() {
		select {
		case <-line.queue.WatchCaughtUp():
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				s.log.Warn("the watch of a queue has not caught up: taking partitions anyway", "policy", line.name, "after", caughtUpWait)
			}
		}
	}
	s.cluster.SetReady(s.policies.layouts)
}
