package shaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// Shaper is the service: HTTP and NATS ingress in front of one bounded queue
// and one drainer per policy. Create it with New and run it with Run. Its
// methods are safe for concurrent use.
type Shaper struct {
	cfg Config
	log *slog.Logger

	mu       sync.RWMutex
	set      *policies.Set
	runtimes map[string]*runtime

	jobs      *jobStore             // job records for GET /v1/jobs/{id}
	overrides jetstream.KeyValue    // live policy overrides
	srv       *server.Server        // embedded JetStream, nil with an external one
	rdb       redis.UniversalClient // admission limiter state, nil without Redis
	nc        *nats.Conn
	js        jetstream.JetStream
	lost      chan error // the NATS connection closed for good while serving
	in        atomic.Pointer[ingress]

	httpAddr atomic.Value // string, once listening
	ready    chan struct{}
	serving  atomic.Bool
	started  time.Time
	leaseWG  sync.WaitGroup
	peers    peers // live shapers on the cluster, for local shares of admission limits
}

// runtime is everything the Shaper keeps for one policy.
type runtime struct {
	pol      atomic.Pointer[policies.Policy]
	q        *queue.Queue
	d        *drain.Drainer
	admit    atomic.Pointer[admission] // the admit block's limiter; nil without one
	deferQ   *queue.Queue              // deferred jobs
	override atomic.Bool               // the live policy is a stored override
	// fullUntil remembers, per key token, until when the key's queue is
	// known to be full (a time.Time), so that a flood on a full key is
	// answered 429 without a JetStream round trip each.
	fullUntil sync.Map
	deferrals deferrals      // this shaper's deferrals its deferred drainer has not yet seen
	deferD    *drain.Drainer // re-admits deferred jobs
	counter   counters
}

// deferrals remembers, per key token, the deferrals this shaper is making
// or made that the deferred drainer's watch has not reported yet: in
// between, a fresh submission must still queue behind them.
type deferrals struct {
	mu   sync.Mutex
	keys map[string]*deferralState
}

type deferralState struct {
	making int       // deferrals started and not yet stored (or failed)
	seq    uint64    // the highest sequence stored
	at     time.Time // when it was stored
}

// ahead reports whether d still holds fresh submissions back, given the
// highest sequence of the key the deferred drainer has seen.
func (d *deferralState) ahead(seen uint64) bool { return d.making > 0 || d.seq > seen }

// deferredAhead reports whether key token has deferred jobs that a fresh
// submission must queue behind: jobs the deferred drainer holds, or ones
// this shaper is deferring or deferred that the drainer has not seen.
func (rt *runtime) deferredAhead(token string, now time.Time) bool {
	st := rt.deferD.Key(token, now)
	if st.Queued > 0 {
		return true
	}
	rt.deferrals.mu.Lock()
	defer rt.deferrals.mu.Unlock()
	d := rt.deferrals.keys[token]
	if d == nil {
		return false
	}
	if d.ahead(st.Seen) {
		return true
	}
	delete(rt.deferrals.keys, token)
	return false
}

// deferring records that a job of key token is being deferred; done
// records where it was stored (0: nowhere).
func (rt *runtime) deferring(token string) (done func(seq uint64)) {
	rt.deferrals.mu.Lock()
	if rt.deferrals.keys == nil {
		rt.deferrals.keys = make(map[string]*deferralState)
	}
	d := rt.deferrals.keys[token]
	if d == nil {
		d = &deferralState{}
		rt.deferrals.keys[token] = d
	}
	d.making++
	rt.deferrals.mu.Unlock()
	return func(seq uint64) {
		rt.deferrals.mu.Lock()
		defer rt.deferrals.mu.Unlock()
		d.making--
		if seq > d.seq {
			d.seq, d.at = seq, time.Now()
		}
	}
}

// sweepDeferrals forgets the deferrals the deferred drainer has seen (or
// that are so old that its watch must have restarted past them: it reports
// every job).
func (rt *runtime) sweepDeferrals(now time.Time) {
	rt.deferrals.mu.Lock()
	defer rt.deferrals.mu.Unlock()
	for token, d := range rt.deferrals.keys {
		if !d.ahead(rt.deferD.Key(token, now).Seen) || d.making == 0 && now.Sub(d.at) > time.Minute {
			delete(rt.deferrals.keys, token)
		}
	}
}

type counters struct {
	admitted, duplicates, rejected, unavailable atomic.Uint64
	deferred, readmitted                        atomic.Uint64
	limited, shadowLimited, limiterErrors       atomic.Uint64
}

// New checks cfg and returns a Shaper ready to Run. It does no I/O.
func New(cfg Config) (*Shaper, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("shaper: http address %q: %w", cfg.HTTPAddr, err)
	}
	return &Shaper{
		cfg:      cfg,
		log:      cfg.Logger,
		set:      cfg.Policies,
		runtimes: make(map[string]*runtime),
		ready:    make(chan struct{}),
		lost:     make(chan error, 1),
	}, nil
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

// Run starts the Shaper and serves until ctx ends, then shuts down
// gracefully: it stops admitting, finishes the deliveries in flight and
// leaves queued jobs in JetStream. It returns an error when it cannot start.
func (s *Shaper) Run(ctx context.Context) error {
	s.started = time.Now()
	// Take the HTTP address first: a taken port must not cost a start-up
	// that drains a moment and then gives up.
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("shaper: http listen %s: %w (see --http)", s.cfg.HTTPAddr, err)
	}
	defer ln.Close()
	if err := s.connect(); err != nil {
		return err
	}
	defer s.disconnect()

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// abort undoes a start-up that got as far as the drainers and leases.
	abort := func(err error) error {
		s.stopDrainers(context.Background())
		cancel()
		s.leaseWG.Wait()
		return err
	}
	if s.rdb, err = connectRedis(runCtx, s.cfg.RedisURL); err != nil {
		return err
	}
	if s.rdb != nil {
		defer s.rdb.Close()
		if err := s.rdb.Ping(runCtx).Err(); err != nil {
			s.log.Warn("redis unreachable at start: admission limits fail open or closed per policy until it answers", "err", err)
		}
	}
	if err := s.openPolicies(runCtx); err != nil {
		return abort(err)
	}

	s.httpAddr.Store(ln.Addr().String())
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute, // a job body that trickles in for longer is cut off
		IdleTimeout:       2 * time.Minute,
	}
	httpDone := make(chan error, 1)
	go func() { httpDone <- hs.Serve(ln) }()

	in, err := s.subscribeIngress()
	if err != nil {
		hs.Close()
		return abort(err)
	}
	s.in.Store(in)
	s.mu.RLock()
	n := len(s.set.Policies())
	s.mu.RUnlock()
	s.serving.Store(true)
	close(s.ready)
	s.log.Info("shaper serving", "http", s.HTTPAddr(), "nats", s.NATSURL(), "policies", n)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-httpDone:
		s.log.Error("http server stopped", "err", err)
	case err := <-s.lost:
		s.log.Error("nats connection closed for good: stopping; start the shaper again", "err", err)
		runErr = fmt.Errorf("shaper: nats connection closed: %w", err)
	}

	// Graceful shutdown: stop admitting, let deliveries in flight end. The
	// HTTP server and the drain each get the whole budget, at the same time:
	// an idle keep-alive connection must not hold the drain up.
	s.serving.Store(false)
	var wg sync.WaitGroup
	wg.Go(func() {
		ictx, icancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer icancel()
		in.stop(ictx)
	})
	wg.Go(func() {
		hctx, hcancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer hcancel()
		if err := hs.Shutdown(hctx); err != nil {
			s.log.Warn("http shutdown", "err", err)
			hs.Close()
		}
	})
	dctx, dcancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer dcancel()
	s.stopDrainers(dctx)
	cancel() // release the drain leases
	s.leaseWG.Wait()
	wg.Wait()
	s.log.Info("shaper stopped")
	return runErr
}

func (s *Shaper) connect() error {
	opts := []nats.Option{
		nats.Name("shaper"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				s.log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { s.log.Info("nats reconnected", "url", nc.ConnectedUrl()) }),
		// A connection is closed for good (no more reconnects) when the
		// server answers with an error nats.go does not recover from. A
		// shaper without its connection can only answer 503: Run stops, so
		// that whatever supervises the process starts it again.
		nats.ClosedHandler(func(nc *nats.Conn) {
			if s.serving.Load() {
				select {
				case s.lost <- cmp.Or(nc.LastError(), errors.New("closed")):
				default:
				}
			}
		}),
	}
	var err error
	if s.cfg.NATSURL == "" {
		if s.srv, err = startEmbedded(s.cfg.NATSListen, s.cfg.DataDir, s.cfg.MaxPayload); err != nil {
			return err
		}
		opts = append(opts, nats.InProcessServer(s.srv))
	} else {
		opts = append(opts, nats.RetryOnFailedConnect(false))
	}
	s.nc, err = nats.Connect(s.cfg.NATSURL, opts...)
	if err != nil {
		s.disconnect()
		return fmt.Errorf("shaper: connect to nats %s: %w", s.cfg.NATSURL, err)
	}
	// Async publishes (the NATS ingress's pipeline) give up after the
	// admission timeout, like a synchronous Admit.
	if s.js, err = jetstream.New(s.nc, jetstream.WithPublishAsyncMaxPending(ingressPipeline), jetstream.WithPublishAsyncTimeout(s.cfg.Timeout)); err != nil {
		s.disconnect()
		return fmt.Errorf("shaper: jetstream: %w", err)
	}
	return nil
}

func (s *Shaper) disconnect() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
}

// openPolicies opens every policy's streams and drainers and starts the
// leases; on an error the caller stops what was started (Run's abort).
func (s *Shaper) openPolicies(ctx context.Context) error {
	var err error
	if s.jobs, err = openJobStore(ctx, s.js, s.cfg.JobTTL, s.cfg.Replicas, s.log); err != nil {
		return err
	}
	leases, err := s.openLeases(ctx)
	if err != nil {
		return err
	}
	for _, p := range s.set.Policies() {
		rt, err := s.openPolicy(ctx, p)
		if err != nil {
			return err
		}
		s.runtimes[p.Name] = rt
	}
	if s.overrides, err = s.openOverrides(ctx); err != nil {
		return err
	}
	follow, err := s.watchOverrides(ctx, s.overrides)
	if err != nil {
		return err
	}
	s.leaseWG.Go(follow)
	s.leaseWG.Go(func() { s.keepMembership(ctx, leases) })
	s.leaseWG.Go(func() { s.sweepKeys(ctx) })
	var first sync.WaitGroup
	for name, rt := range s.runtimes {
		first.Add(1)
		s.leaseWG.Go(func() { s.holdLease(ctx, leases, name, rt, first.Done) })
	}
	first.Wait()
	return nil
}

func (s *Shaper) openPolicy(ctx context.Context, p policies.Policy) (*runtime, error) {
	qcfg := queue.Config{
		Replicas:   s.cfg.Replicas,
		MaxPayload: s.cfg.MaxPayload,
		Timeout:    s.cfg.Timeout,
		Logger:     s.log,
	}
	q, err := queue.Open(ctx, s.js, p.Name, p.Queue, qcfg)
	if err != nil {
		return nil, fmt.Errorf("shaper: policy %q: %w", p.Name, err)
	}
	sink, err := s.sinkFor(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("shaper: policy %q: %w", p.Name, err)
	}
	rt := &runtime{q: q}
	rt.pol.Store(&p)
	if err := s.setAdmission(rt, p); err != nil {
		return nil, fmt.Errorf("shaper: policy %q: admit: %w", p.Name, err)
	}
	if err := s.openDead(ctx, p.Name); err != nil {
		return nil, fmt.Errorf("shaper: policy %q: %w", p.Name, err)
	}
	rt.d = drain.New(q, sink, paceOf(p), drain.Config{
		Workers:    s.cfg.Workers,
		Logger:     s.log,
		DeadLetter: s.deadLetterFunc(rt, "queue"),
		FailReason: drain.ReasonDelivery,
		OnDeliver:  s.recordDelivery(rt),
		Passive:    true, // until this shaper holds the policy's lease
	})
	if err := s.openDeferral(ctx, rt, p); err != nil {
		return nil, fmt.Errorf("shaper: policy %q: %w", p.Name, err)
	}
	rt.d.Start(ctx)
	rt.deferD.Start(ctx)
	return rt, nil
}

// paceOf returns the pace p's drainers deliver at: its outflow per key,
// its total cap, and its retry bounds.
func paceOf(p policies.Policy) drain.Pace {
	return drain.Pace{
		Interval: p.Outflow.Interval(),
		Total:    p.Total.Interval(),
		Retry: drain.Retry{
			Attempts:   p.Retry.Attempts,
			Backoff:    p.Retry.Backoff,
			MaxBackoff: p.Retry.MaxBackoff,
			Deadline:   p.Retry.Deadline,
		},
	}
}

func (s *Shaper) sinkFor(ctx context.Context, p policies.Policy) (drain.Sink, error) {
	if p.Deliver.Webhook != "" {
		return drain.NewWebhookSink(p.Deliver.Webhook, p.Deliver.Timeout, nil), nil
	}
	if name := p.Deliver.Stream; name != "" {
		// Deliveries into a stream need the stream: create it when missing,
		// leave an operator's own stream as it is.
		_, err := s.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
				Name:       name,
				Subjects:   []string{p.DeliverSubject() + ".>"},
				Replicas:   s.cfg.Replicas,
				Duplicates: 2 * time.Minute,
			})
		}
		if err != nil {
			return nil, fmt.Errorf("delivery stream %s: %w", name, err)
		}
	}
	return drain.NewNATSSink(s.nc, drain.NATSConfig{
		Subject: p.DeliverSubject(),
		Stream:  p.Deliver.Stream != "",
		Confirm: p.Deliver.Confirm,
		Timeout: p.Deliver.Timeout,
	})
}

func (s *Shaper) stopDrainers(ctx context.Context) {
	var wg sync.WaitGroup
	for name, rt := range s.runtimes {
		for _, d := range []*drain.Drainer{rt.d, rt.deferD} {
			wg.Go(func() {
				if err := d.Drain(ctx); err != nil {
					s.log.Warn("drain at shutdown", "policy", name, "err", err)
				}
				d.Stop()
			})
		}
	}
	wg.Wait()
}

// sweepKeys forgets expired full-queue verdicts, and deferrals the
// deferred drainer has seen, of keys nobody submits to any more, until ctx
// ends.
func (s *Shaper) sweepKeys(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.mu.RLock()
			for _, rt := range s.runtimes {
				rt.fullUntil.Range(func(k, v any) bool {
					if !now.Before(v.(time.Time)) {
						rt.fullUntil.Delete(k)
					}
					return true
				})
				rt.sweepDeferrals(now)
			}
			s.mu.RUnlock()
		}
	}
}

// recordDelivery keeps job records of delivered and failing jobs.
func (s *Shaper) recordDelivery(rt *runtime) func(drain.Event) {
	return func(e drain.Event) {
		switch {
		case e.Reason != "":
			// dead-lettered: recorded by deadLetterFunc
		case e.Err == nil:
			s.jobs.put(jobRecord{ID: e.ID, Policy: rt.pol.Load().Name, Key: e.Key, Status: statusDelivered, Attempts: e.Attempt})
		default:
			s.jobs.put(jobRecord{ID: e.ID, Policy: rt.pol.Load().Name, Key: e.Key, Status: statusQueued, Attempts: e.Attempt - 1, NextTry: e.RetryAt, LastError: e.Err.Error()})
		}
	}
}

// runtime returns the runtime of the named policy, or nil.
func (s *Shaper) runtime(name string) *runtime {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.runtimes[name]
}
