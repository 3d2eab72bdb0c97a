package shaper

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
	"github.com/shaper-dev/shaper/shaper/internal/ingress"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
)

// Defaults for the zero Config.
const (
	DefaultHTTPAddr        = "127.0.0.1:8080"
	DefaultNATSListen      = "127.0.0.1:4222"
	DefaultDataDir         = "shaper-data"
	DefaultSubmitSubject   = ingress.DefaultSubject
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultSyncInterval is how often the embedded server syncs its store
	// to disk (nats-server's own default).
	DefaultSyncInterval = 2 * time.Minute
	// DefaultLeaseTTL is how long a policy's drain stays with a shaper that
	// stopped renewing its lease (the failover time).
	DefaultLeaseTTL = cluster.DefaultLeaseTTL
	// MinLeaseTTL is the shortest LeaseTTL accepted.
	MinLeaseTTL = time.Second
	// DefaultJobTTL is how long GET /v1/jobs/{id} knows a job after its last change.
	DefaultJobTTL = jobs.DefaultTTL
	// DefaultJobRecords bounds the job records kept (see Config.JobRecords).
	DefaultJobRecords = jobs.DefaultMaxRecords
)

// Config configures a Shaper. Policies is required; every other field's zero
// value means the documented default.
type Config struct {
	// Policies is the policy set to serve.
	Policies *policies.Set
	// PolicyFile is the file Policies came from, which Reload reads again;
	// empty, Reload refuses.
	PolicyFile string

	// HTTPAddr is the HTTP listen address. Default DefaultHTTPAddr; ":0" picks a port.
	HTTPAddr string

	// NATSURL connects to an external NATS cluster with JetStream. When it is
	// empty the Shaper runs an embedded JetStream server storing in DataDir
	// and listening on NATSListen.
	NATSURL string
	// NATSListen is the embedded server's client address, reachable by
	// outside consumers. Default DefaultNATSListen; "127.0.0.1:-1" picks a port.
	NATSListen string
	// NATSToken is the embedded server's client token, required when
	// NATSListen is beyond loopback (clients then connect with
	// nats://<token>@host:port); with an external server it is sent as this
	// shaper's token.
	NATSToken string
	// NATSCreds and NATSNKey are files with this shaper's credentials for
	// an external NATS server: a .creds file (user JWT and NKey seed), or an
	// NKey seed file.
	NATSCreds, NATSNKey string
	// NATSTLSCA, NATSTLSCert and NATSTLSKey are PEM files for TLS to an
	// external NATS server: the CA to trust, and this shaper's client
	// certificate and key.
	NATSTLSCA, NATSTLSCert, NATSTLSKey string
	// Sync is how the embedded server writes its store to disk: every
	// SyncInterval (default DefaultSyncInterval), or, with SyncAlways, before
	// it acknowledges each write. A job answered 202 survives kill -9 either
	// way (it is in the operating system's cache); only SyncAlways keeps it
	// through a power loss, at a cost in admission speed.
	SyncInterval time.Duration
	SyncAlways   bool
	// DataDir is the embedded server's store. Default DefaultDataDir.
	DataDir string
	// MaxStore bounds the embedded server's store, in bytes (its
	// max_file_store). Default 0: 3/4 of the disk free under DataDir at
	// start. Of either, the last 1/32 (queue.ReserveFor) is kept from jobs
	// for the drain leases, the membership and the job records.
	MaxStore int64
	// Replicas is the replica count of the Shaper's streams and buckets (1,
	// 3 or 5). 0 (the default) keeps as many as its existing store keeps (1
	// on a new store); a count below the store's is refused at start, so
	// that one shaper started without it cannot lower every stream's.
	Replicas int

	// AdminToken, when set, is the bearer token the admin routes require
	// (tuning, reload, dead letters, the operator page). Without one they
	// answer loopback clients only.
	AdminToken string
	// AdminLoopbackOnly allows an HTTPAddr beyond loopback without an
	// AdminToken: the admin routes then answer loopback clients only. New
	// refuses that combination otherwise, since behind a proxy on the same
	// host every client looks like loopback.
	AdminLoopbackOnly bool
	// SubmitToken, when set, is the bearer token submissions over HTTP (and
	// job status) require. NATS submissions are guarded by NATS's own auth.
	SubmitToken string

	// RedisURL, when set, keeps admission limiter state in Redis (shared by
	// every shaper); otherwise admission limits are kept in memory.
	RedisURL string

	// MaxPayload bounds a job's payload in bytes. Default queue.DefaultMaxPayload.
	MaxPayload int
	// Workers bounds the deliveries in flight per policy. Default drain.DefaultWorkers.
	Workers int
	// WatchHeadersOnly makes each queue's watch read jobs' headers only,
	// so that the shaper delivering a job reads it once more. By default
	// the watch reads every job whole and the drain delivers it without
	// another read (queue.Config.WatchHeadersOnly): a request to the
	// queue less per delivery, at the cost of every shaper watching a
	// queue receiving every payload of it, also of the partitions others
	// drain. Worth setting with several shapers and large payloads.
	WatchHeadersOnly bool
	// SubmitSubject is the NATS ingress root: requests to <root>.<policy>.<key>.
	// Default DefaultSubmitSubject. A policy delivering under it (or above
	// it) is refused by New and by a reload: its deliveries would be
	// submitted again.
	SubmitSubject string
	// StartTimeout bounds how long Run retries to create or bind its
	// streams and buckets (a cluster still electing, shapers racing to
	// create the same store). Default DefaultStartTimeout.
	StartTimeout time.Duration
	// ShutdownTimeout bounds the graceful part of shutdown. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Timeout bounds each JetStream call on the admission path; past it the
	// producer gets 503. Default queue.DefaultTimeout.
	Timeout time.Duration

	// InstanceID names this shaper in the drain leases; a restarted shaper
	// with the same id takes its leases back at once. Default: hostname/HTTPAddr.
	InstanceID string
	// LeaseTTL is how long a policy's drain stays with a shaper that stopped
	// renewing its lease (failover time). Default DefaultLeaseTTL.
	LeaseTTL time.Duration

	// JobTTL is how long GET /v1/jobs/{id} knows a job after its last
	// change. Default DefaultJobTTL.
	JobTTL time.Duration
	// JobRecords bounds the job records kept for what GET /v1/jobs/{id}
	// cannot derive from the queues (deferred jobs, failed attempts, dead
	// letters); past it the oldest go, and with them the status of the jobs
	// delivered before them. Default DefaultJobRecords.
	JobRecords int64

	// Logger receives the Shaper's logs. Default: discard.
	Logger *slog.Logger

	// TracerProvider, when set, records the spans of every job: its
	// submission and store, its wait in the queue, each delivery attempt
	// and its dead-lettering, in the trace the producer's traceparent
	// names. Default: no spans are recorded (deliveries still carry the
	// producer's traceparent, or a new unsampled one).
	TracerProvider trace.TracerProvider
	// MetricReaders read the Shaper's metrics besides the Prometheus
	// exporter behind GET /metrics (an OTLP exporter's periodic reader,
	// say). Run shuts them down when it returns.
	MetricReaders []sdkmetric.Reader
	// Resource describes this shaper in exported metrics. Default:
	// service.name "shaper".
	Resource *resource.Resource
}

func (c Config) withDefaults() (Config, error) {
	if c.Policies == nil || len(c.Policies.Policies()) == 0 {
		return c, errors.New("shaper: config: no policies")
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.NATSListen == "" {
		c.NATSListen = DefaultNATSListen
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.SubmitSubject == "" {
		c.SubmitSubject = DefaultSubmitSubject
	}
	if err := deliveryLoop(c.Policies, c.SubmitSubject); err != nil {
		return c, &ConfigError{Field: "SubmitSubject", Err: err}
	}
	if c.Timeout <= 0 {
		c.Timeout = queue.DefaultTimeout
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.InstanceID == "" {
		c.InstanceID = cluster.DefaultInstance(c.HTTPAddr)
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.LeaseTTL < MinLeaseTTL {
		return c, &ConfigError{Field: "LeaseTTL", Err: fmt.Errorf("%v: want at least %v: a lease is renewed every third of it, and a renewal must get through a JetStream write in that time", c.LeaseTTL, MinLeaseTTL)}
	}
	if err := maxStoreError(c); err != nil {
		return c, err
	}
	if c.JobTTL <= 0 {
		c.JobTTL = DefaultJobTTL
	}
	if c.JobRecords <= 0 {
		c.JobRecords = DefaultJobRecords
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// deliveryLoop returns an error naming the first policy of set that
// delivers over NATS under the NATS ingress's subject root (or above it):
// its deliveries would be taken as submissions, again and again. The
// policy file's own check refuses the default roots (shaper.submit…); this
// one covers a SubmitSubject of the Config's own.
func deliveryLoop(set *policies.Set, submit string) error {
	if p, ok := set.DeliveringUnder(submit); ok {
		return fmt.Errorf("policy %q delivers to %s, under this shaper's NATS submissions (%s.>): its deliveries would be submitted again; deliver to another subject, or give the shaper another submit subject", p.Name, p.DeliverSubject(), submit)
	}
	return nil
}
