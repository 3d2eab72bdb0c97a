package shaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/ingress"
)

// ConfigError is an error in one setting of a Config, named by its field
// (HTTPAddr, NATSListen, DataDir, RedisURL…), so that a command line can
// name its own flag for it.
type ConfigError struct {
	Field string
	Err   error
}

// settingNames are ConfigError's words for the fields.
var settingNames = map[string]string{
	"HTTPAddr":      "HTTP address",
	"NATSURL":       "NATS",
	"NATSListen":    "NATS listen address",
	"DataDir":       "data directory",
	"RedisURL":      "Redis URL",
	"InstanceID":    "instance id",
	"AdminToken":    "admin token",
	"NATSToken":     "NATS token",
	"NATSCreds":     "NATS credentials",
	"NATSNKey":      "NATS NKey seed",
	"NATSTLSCA":     "NATS TLS CA",
	"NATSTLSCert":   "NATS TLS client certificate",
	"LeaseTTL":      "lease TTL",
	"Replicas":      "replicas",
	"MaxStore":      "max store",
	"SubmitSubject": "submit subject",
}

func (e *ConfigError) Error() string {
	name := settingNames[e.Field]
	if name == "" {
		name = e.Field
	}
	return "shaper: " + name + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// connect connects to NATS: to the embedded server it starts first, or to
// Config.NATSURL.
func (s *Shaper) connect(ctx context.Context) error {
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
	if s.cfg.NATSToken != "" {
		opts = append(opts, nats.Token(s.cfg.NATSToken))
	}
	var err error
	if s.cfg.NATSURL == "" {
		if s.srv, err = startEmbedded(s.cfg); err != nil {
			return err
		}
		opts = append(opts, nats.InProcessServer(s.srv))
	} else {
		// A server alive at the TCP level but not answering (frozen,
		// stalled, a path that drops packets) is left for another of the
		// cluster once two pings a pingInterval apart go unanswered:
		// nats.go's default (2 minutes) kept a shaper on a frozen node,
		// answering 503, for as long as it stayed frozen.
		opts = append(opts, nats.RetryOnFailedConnect(false), nats.PingInterval(pingInterval), nats.MaxPingsOutstanding(2))
		auth, err := s.natsAuth()
		if err != nil {
			return err
		}
		opts = append(opts, auth...)
	}
	s.nc, err = s.dial(ctx, opts)
	if err != nil {
		s.disconnect()
		return &ConfigError{Field: "NATSURL", Err: fmt.Errorf("connect to %s: %w", RedactURL(s.cfg.NATSURL), err)}
	}
	if s.cfg.NATSURL != "" {
		if err := s.fitPayload(s.nc.MaxPayload()); err != nil {
			s.disconnect()
			return err
		}
	}
	// Async publishes (the NATS ingress's pipeline) give up after the
	// admission timeout, like a synchronous Admit.
	if s.js, err = jetstream.New(s.nc, jetstream.WithPublishAsyncMaxPending(ingress.PipelineDepth), jetstream.WithPublishAsyncTimeout(s.cfg.Timeout)); err != nil {
		s.disconnect()
		return fmt.Errorf("shaper: jetstream: %w", err)
	}
	return nil
}

// connectWait bounds how long a starting shaper waits for a NATS server
// that refuses its connection: one started at the same time (a cluster
// and its shapers brought up together) is given that long to listen.
const connectWait = 20 * time.Second

// pingInterval is how often the shaper pings its NATS server: one that
// answers none of two is left for another within 2-3 of them.
const pingInterval = 2 * time.Second

// dial connects with opts: to the embedded server at once; to
// Config.NATSURL retrying every 250 ms while no server of it accepts a
// connection, for connectWait at most (or until ctx ends), saying so in
// the log and at /readyz. Any other error (a refused credential, a bad
// URL) ends it at once.
func (s *Shaper) dial(ctx context.Context, opts []nats.Option) (*nats.Conn, error) {
	if s.cfg.NATSURL == "" {
		return nats.Connect("", opts...)
	}
	deadline := time.Now().Add(connectWait)
	for tries := 1; ; tries++ {
		nc, err := nats.Connect(s.cfg.NATSURL, opts...)
		if err == nil || !errors.Is(err, nats.ErrNoServers) {
			return nc, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (retried for %s)", err, connectWait)
		}
		if tries == 1 {
			s.log.Warn("no NATS server accepts a connection yet: retrying", "url", RedactURL(s.cfg.NATSURL), "for", connectWait, "err", err)
			s.starting.at("waiting for NATS at " + RedactURL(s.cfg.NATSURL))
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// headerRoom is the room a job's headers take in a NATS message beside its
// payload: the store's and the delivery's, a dead letter's history.
const headerRoom = 64 << 10

// fitPayload bounds a job's payload by what the NATS server carries
// (server, its max_payload): a job is stored, delivered and dead-lettered
// as one message with its headers, and the server refuses a larger one. A
// job past it would be answered 202 and never delivered; it is answered
// 413 instead.
func (s *Shaper) fitPayload(server int64) error {
	want := cmp.Or(s.cfg.MaxPayload, queue.DefaultMaxPayload)
	room := int(server) - headerRoom
	if room < 1<<10 {
		return &ConfigError{Field: "NATSURL", Err: fmt.Errorf("the NATS server's max_payload is %d bytes: too little for a job and its headers (%d bytes); raise it in the servers' configuration", server, headerRoom)}
	}
	if want > room {
		s.log.Warn("max payload lowered to what the NATS server carries: larger jobs are answered 413",
			"max_payload", room, "asked", want, "server_max_payload", server, "header_room", headerRoom,
			"hint", fmt.Sprintf("give the NATS servers a max_payload of at least %d to take jobs of %d bytes", want+headerRoom, want))
		want = room
	}
	s.cfg.MaxPayload = want
	return nil
}

// natsAuth returns the options that authenticate this shaper to an
// external NATS server: credentials, NKey, TLS.
func (s *Shaper) natsAuth() ([]nats.Option, error) {
	var opts []nats.Option
	if f := s.cfg.NATSCreds; f != "" {
		if _, err := os.Stat(f); err != nil {
			return nil, &ConfigError{Field: "NATSCreds", Err: err}
		}
		opts = append(opts, nats.UserCredentials(f))
	}
	if f := s.cfg.NATSNKey; f != "" {
		o, err := nats.NkeyOptionFromSeed(f)
		if err != nil {
			return nil, &ConfigError{Field: "NATSNKey", Err: err}
		}
		opts = append(opts, o)
	}
	if f := s.cfg.NATSTLSCA; f != "" {
		if _, err := os.Stat(f); err != nil {
			return nil, &ConfigError{Field: "NATSTLSCA", Err: err}
		}
		opts = append(opts, nats.RootCAs(f))
	}
	if s.cfg.NATSTLSCert != "" || s.cfg.NATSTLSKey != "" {
		if s.cfg.NATSTLSCert == "" || s.cfg.NATSTLSKey == "" {
			return nil, &ConfigError{Field: "NATSTLSCert", Err: errors.New("a client certificate needs both the certificate and its key")}
		}
		opts = append(opts, nats.ClientCert(s.cfg.NATSTLSCert, s.cfg.NATSTLSKey))
	}
	return opts, nil
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

// startEmbedded runs an in-process nats-server with JetStream storing in
// dir, listening for outside clients on listen ("host:port", port -1 for
// any). Beyond loopback it needs a client token: it would accept anyone.
func startEmbedded(cfg Config) (*server.Server, error) {
	listen, dir, token := cfg.NATSListen, cfg.DataDir, cfg.NATSToken
	host, port, err := embeddedListen(cfg)
	if err != nil {
		return nil, err
	}
	store := filepath.Join(dir, "jetstream")
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, &ConfigError{Field: "DataDir", Err: err}
	}
	if f, err := os.CreateTemp(store, ".write-check-*"); err != nil {
		return nil, &ConfigError{Field: "DataDir", Err: fmt.Errorf("%s is not writable: %w", dir, err)}
	} else {
		f.Close()
		os.Remove(f.Name())
	}
	if port > 0 {
		// The server reports a listen failure only through its log: try first.
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return nil, &ConfigError{Field: "NATSListen", Err: fmt.Errorf("the embedded NATS server cannot listen on %s: %w", listen, err)}
		}
		ln.Close()
	}
	opts := &server.Options{
		ServerName: "shaper",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   store,
		NoSigs:     true,
		NoLog:      true,
		// Room for the largest job plus its headers (the default is 1 MB).
		MaxPayload:    int32(max(cfg.MaxPayload, queue.DefaultMaxPayload) + headerRoom),
		Authorization: token,
		SyncInterval:  cmp.Or(cfg.SyncInterval, DefaultSyncInterval),
		SyncAlways:    cfg.SyncAlways,
		// 0: the server's default, 3/4 of the disk free at its start.
		JetStreamMaxStore: cfg.MaxStore,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("shaper: embedded nats: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("shaper: embedded nats did not start on %s with its store in %s", listen, store)
	}
	return srv, nil
}

// connectRedis opens the Redis client for admission limits, or returns nil
// when no Redis is configured. Redis being down at start is not fatal: each
// limiter fails open or closed as its policy says until Redis answers.
func connectRedis(url string) (redis.UniversalClient, error) {
	if url == "" {
		return nil, nil
	}
	if !strings.Contains(url, "://") {
		return nil, &ConfigError{Field: "RedisURL", Err: fmt.Errorf("%q: want redis://HOST:PORT (did you mean \"redis://%s\"?), rediss:// for TLS", url, url)}
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, &ConfigError{Field: "RedisURL", Err: err}
	}
	opts.ContextTimeoutEnabled = true // let the limiter's per-decision timeout cut a hung Redis short
	opts.DialTimeout = 500 * time.Millisecond
	opts.ReadTimeout = 200 * time.Millisecond
	opts.WriteTimeout = 200 * time.Millisecond
	return redis.NewClient(opts), nil
}

// embeddedListen checks where the embedded NATS server of cfg would
// listen, without I/O: its host and port, or a *ConfigError for a bad
// address, or one beyond loopback without a client token (it would
// accept anyone).
func embeddedListen(cfg Config) (host string, port int, err error) {
	listen := cfg.NATSListen
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, &ConfigError{Field: "NATSListen", Err: fmt.Errorf("%q: %w", listen, err)}
	}
	if cfg.NATSToken == "" && !httpapi.Loopback(host) {
		return "", 0, &ConfigError{Field: "NATSToken", Err: fmt.Errorf("the embedded NATS server would listen beyond loopback (%s) without credentials: anyone reaching it could read and remove queued jobs; set a NATS token", listen)}
	}
	if port, err = strconv.Atoi(portStr); err != nil {
		return "", 0, &ConfigError{Field: "NATSListen", Err: fmt.Errorf("%q: bad port", listen)}
	}
	return host, port, nil
}

// RedactURL returns urls (a NATS URL, or several separated by commas) as
// they may be shown or logged: a password replaced by xxxxx, and a user
// without a password (nats://TOKEN@host, NATS's token form) as xxxxx too.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			if err != nil && strings.Contains(p, "@") {
				parts[i] = "xxxxx@" + p[strings.LastIndex(p, "@")+1:]
			}
			continue
		}
		if _, ok := u.User.Password(); ok {
			parts[i] = u.Redacted()
		} else {
			u.User = url.User("xxxxx")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
