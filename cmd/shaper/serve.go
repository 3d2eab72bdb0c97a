package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the shaper: HTTP and NATS ingress, bounded queues, paced drain",
		Description: `With no --nats-url the shaper runs an embedded JetStream server that stores
in --data and listens on --nats-listen, so consumers can subscribe to the
delivery subjects (shaper.out.<policy>.<key> by default).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "policies", Value: "policies.yaml", Usage: "policy file (YAML)", EnvVars: envVar("policies")},
			&cli.StringFlag{Name: "http", Value: shaper.DefaultHTTPAddr, Usage: "HTTP listen address", EnvVars: envVar("http")},
			&cli.StringFlag{Name: "data", Value: shaper.DefaultDataDir, Usage: "data directory of the embedded JetStream", EnvVars: envVar("data")},
			&cli.StringFlag{Name: "nats-listen", Value: shaper.DefaultNATSListen, Usage: "client address of the embedded JetStream", EnvVars: envVar("nats-listen")},
			&cli.StringFlag{Name: "nats-url", Usage: "external NATS URL(s) with JetStream; disables the embedded server (waited for up to 20s at start while none listens)", EnvVars: envVar("nats-url")},
			&cli.StringFlag{Name: "max-store", Usage: "the most the embedded JetStream stores on disk, at least 1MiB (4GiB, 512MiB, 4G; 512MB is decimal); its last 1/32 (256KiB to 256MiB) is kept for the shaper's own writes (lease renewals, membership, job records): jobs are refused 503 before it", DefaultText: "3/4 of the disk free at start", EnvVars: envVar("max-store")},
			&cli.StringFlag{Name: "sync", Value: "2m", Usage: "how the embedded JetStream writes to disk: always (before each 202: survives a power loss, slower) or an interval (a 202 survives kill -9, not a power loss)", EnvVars: envVar("sync")},
			&cli.StringFlag{Name: "admin-token", Usage: "bearer token the admin routes require (tuning, reload, dead letters); without one they answer loopback clients only", EnvVars: envVar("admin-token")},
			&cli.BoolFlag{Name: "admin-loopback-only", Usage: "allow --http beyond loopback without --admin-token (admin routes then answer loopback clients only)", EnvVars: envVar("admin-loopback-only")},
			&cli.StringFlag{Name: "submit-token", Usage: "bearer token HTTP submissions and job status require (NATS submissions: --nats-token or the server's permissions)", DefaultText: "none", EnvVars: envVar("submit-token")},
			&cli.StringFlag{Name: "nats-token", Usage: "client token of the embedded NATS server (required with a --nats-listen beyond loopback), or this shaper's token for --nats-url", EnvVars: envVar("nats-token")},
			&cli.StringFlag{Name: "nats-creds", Usage: "credentials file (.creds) for --nats-url", EnvVars: envVar("nats-creds")},
			&cli.StringFlag{Name: "nats-nkey", Usage: "NKey seed file for --nats-url", EnvVars: envVar("nats-nkey")},
			&cli.StringFlag{Name: "nats-tls-ca", Usage: "CA certificate (PEM) to trust for --nats-url", EnvVars: envVar("nats-tls-ca")},
			&cli.StringFlag{Name: "nats-tls-cert", Usage: "client certificate (PEM) for --nats-url", EnvVars: envVar("nats-tls-cert")},
			&cli.StringFlag{Name: "nats-tls-key", Usage: "client key (PEM) for --nats-url", EnvVars: envVar("nats-tls-key")},
			&cli.StringFlag{Name: "redis-url", Usage: "Redis URL for admission limits shared by several shapers", EnvVars: envVar("redis-url")},
			&cli.IntFlag{Name: "replicas", Usage: "replicas of the shaper's streams and buckets: 1, 3 or 5 (give 3 on a cluster); never fewer than its store keeps", DefaultText: "as many as the store keeps, 1 on a new one", EnvVars: envVar("replicas")},
			&cli.IntFlag{Name: "max-payload", Value: 1 << 20, Usage: "largest job payload, in bytes", EnvVars: envVar("max-payload")},
			&cli.IntFlag{Name: "workers", Value: drain.DefaultWorkers, Usage: "deliveries in flight per policy", EnvVars: envVar("workers")},
			&cli.BoolFlag{Name: "watch-headers-only", Usage: "watch the queues for new jobs by their headers only, and read each job again when it is delivered: less traffic with several shapers and large payloads (without it, every shaper receives every job's payload once, and a delivery needs no read)", EnvVars: envVar("watch-headers-only")},
			&cli.DurationFlag{Name: "job-ttl", Value: shaper.DefaultJobTTL, Usage: "how long GET /v1/jobs/{id} knows a job after its last change", EnvVars: envVar("job-ttl")},
			&cli.Int64Flag{Name: "job-records", Value: shaper.DefaultJobRecords, Usage: "at most this many job records (deferred jobs, failed attempts, dead letters) are kept; the oldest go first", EnvVars: envVar("job-records")},
			&cli.StringFlag{Name: "instance-id", Usage: "this shaper's name in the drain leases", DefaultText: "hostname/--http", EnvVars: envVar("instance-id")},
			&cli.DurationFlag{Name: "start-timeout", Value: shaper.DefaultStartTimeout, Usage: "how long start-up retries creating and binding its streams and buckets", EnvVars: envVar("start-timeout")},
			&cli.DurationFlag{Name: "lease-ttl", Value: shaper.DefaultLeaseTTL, Usage: "how long a drain lease outlives its holder's last renewal: the fail-over time when a shaper dies (every shaper of a cluster must use the same)", EnvVars: envVar("lease-ttl")},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: shaper.DefaultShutdownTimeout, Usage: "how long a graceful shutdown may take", EnvVars: envVar("shutdown-timeout")},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: envVar("log-level")},
			&cli.BoolFlag{Name: "log-json", Usage: "log as JSON lines", EnvVars: envVar("log-json")},
		},
		Action: func(c *cli.Context) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				return cli.Exit(fmt.Sprintf("shaper serve: --log-level %q: want debug, info, warn or error", c.String("log-level")), cmdline.ExitUsage)
			}
			if err := serveValues(c); err != nil {
				return err
			}
			hopts := &slog.HandlerOptions{Level: level}
			var h slog.Handler = slog.NewTextHandler(c.App.ErrWriter, hopts)
			if c.Bool("log-json") {
				h = slog.NewJSONHandler(c.App.ErrWriter, hopts)
			}
			log := slog.New(h)
			redis.SetLogger(&redisLog{log: log})
			set, err := policies.Load(c.String("policies"))
			if err != nil {
				return cli.Exit(err.Error(), exitBadPolicies)
			}
			sync := c.String("sync")
			var syncEvery time.Duration
			if sync != "always" {
				if syncEvery, err = time.ParseDuration(sync); err != nil || syncEvery <= 0 {
					return cli.Exit(fmt.Sprintf("shaper serve: --sync %q: want always or a positive duration such as 2m", sync), cmdline.ExitUsage)
				}
			}
			var maxStore int64
			if v := c.String("max-store"); v != "" {
				if maxStore, err = parseSize(v); err == nil && maxStore == 0 {
					err = fmt.Errorf("%q: want a positive size (leave --max-store out for 3/4 of the disk free at start)", v)
				}
				if err != nil {
					return cli.Exit("shaper serve: --max-store "+err.Error(), cmdline.ExitUsage)
				}
			}
			tel, err := telemetryFromEnv(c.Context, log)
			if err != nil {
				return err
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := tel.shutdown(ctx); err != nil {
					log.Warn("telemetry: last export failed", "err", err)
				}
			}()
			if len(tel.exports) > 0 {
				log.Info("opentelemetry: exporting "+strings.Join(tel.exports, " and "), "sampler", cmp.Or(os.Getenv("OTEL_TRACES_SAMPLER"), "parentbased_always_on"))
			}
			var tracer trace.TracerProvider
			if tel.tracer != nil {
				tracer = tel.tracer
			}
			s, err := shaper.New(shaper.Config{
				SyncAlways:        sync == "always",
				SyncInterval:      syncEvery,
				Policies:          set,
				PolicyFile:        c.String("policies"),
				HTTPAddr:          c.String("http"),
				NATSURL:           c.String("nats-url"),
				NATSListen:        c.String("nats-listen"),
				DataDir:           c.String("data"),
				MaxStore:          maxStore,
				Replicas:          c.Int("replicas"),
				RedisURL:          c.String("redis-url"),
				MaxPayload:        c.Int("max-payload"),
				Workers:           c.Int("workers"),
				WatchHeadersOnly:  c.Bool("watch-headers-only"),
				ShutdownTimeout:   c.Duration("shutdown-timeout"),
				StartTimeout:      c.Duration("start-timeout"),
				JobTTL:            c.Duration("job-ttl"),
				JobRecords:        c.Int64("job-records"),
				InstanceID:        c.String("instance-id"),
				LeaseTTL:          c.Duration("lease-ttl"),
				AdminToken:        c.String("admin-token"),
				AdminLoopbackOnly: c.Bool("admin-loopback-only"),
				SubmitToken:       c.String("submit-token"),
				NATSToken:         c.String("nats-token"),
				NATSCreds:         c.String("nats-creds"),
				NATSNKey:          c.String("nats-nkey"),
				NATSTLSCA:         c.String("nats-tls-ca"),
				NATSTLSCert:       c.String("nats-tls-cert"),
				NATSTLSKey:        c.String("nats-tls-key"),
				Logger:            log,
				TracerProvider:    tracer,
				MetricReaders:     tel.readers,
				Resource:          tel.resource,
			})
			if err != nil {
				// New only checks the settings: what it refuses is a bad
				// command line, to fix before running again.
				return cli.Exit(withFlag(err).Error(), cmdline.ExitUsage)
			}
			// SIGHUP reloads the policy file (closing a terminal sends it too:
			// it must not kill the shaper).
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go func() {
				select {
				case <-s.Ready():
					fmt.Fprintf(c.App.ErrWriter, "shaper: serving %s on http://%s (NATS %s); Ctrl-C stops, SIGHUP reloads %s\n",
						policyCount(len(set.Policies())), s.HTTPAddr(), shaper.RedactURL(s.NATSURL()), c.String("policies"))
				case <-c.Context.Done():
					return
				}
				for {
					select {
					case <-hup:
						log.Info("SIGHUP: reloading the policy file", "file", c.String("policies"))
						// Reload logs each change, and every error of a refused
						// file; the counts say it is done, even when nothing changed.
						if rep, err := s.Reload(c.Context); err == nil {
							log.Info("reload: done", "changed", len(rep.Changed), "added", len(rep.Added), "removed", len(rep.Removed),
								"unchanged", rep.Unchanged, "warnings", len(rep.Warnings), "restart_pending", len(rep.RestartPending))
						}
					case <-c.Context.Done():
						return
					}
				}
			}()
			return withFlag(s.Run(c.Context))
		},
	}
}

// serveValues refuses values of serve's flags that mean nothing (exit 2,
// before anything starts): a size or count below 1, a duration not above
// 0 (shaper.Config would take either for its default), and more than one
// replica of the streams on the embedded server, a single node (it was
// retried until --start-timeout, then failed).
func serveValues(c *cli.Context) error {
	bad := func(format string, a ...any) error {
		return cli.Exit("shaper serve: "+fmt.Sprintf(format, a...), cmdline.ExitUsage)
	}
	if n := c.Int("workers"); n < 1 {
		return bad("--workers %d: want at least 1 (deliveries in flight per policy; default %d)", n, drain.DefaultWorkers)
	}
	if n := c.Int("max-payload"); n < 1 {
		return bad("--max-payload %d: want at least 1 (bytes)", n)
	}
	if n := c.Int64("job-records"); n < 1 {
		return bad("--job-records %d: want at least 1", n)
	}
	for _, name := range []string{"job-ttl", "start-timeout", "lease-ttl", "shutdown-timeout"} {
		if d := c.Duration(name); d <= 0 {
			return bad("--%s %s: want a positive duration", name, d)
		}
	}
	switch n := c.Int("replicas"); {
	case n == 0 && !c.IsSet("replicas"):
	case n != 1 && n != 3 && n != 5:
		return bad("--replicas %d: want 1, 3 or 5", n)
	case n > 1 && c.String("nats-url") == "":
		return bad("--replicas %d: the embedded JetStream is one node: replicas need a cluster (--nats-url)", n)
	}
	return nil
}

// configFlags are the serve flags of shaper.Config's fields.
var configFlags = map[string]string{
	"HTTPAddr":    "--http",
	"NATSURL":     "--nats-url",
	"NATSListen":  "--nats-listen",
	"Replicas":    "--replicas",
	"DataDir":     "--data",
	"MaxStore":    "--max-store",
	"RedisURL":    "--redis-url",
	"InstanceID":  "--instance-id",
	"LeaseTTL":    "--lease-ttl",
	"AdminToken":  "--admin-token, or --admin-loopback-only",
	"NATSToken":   "--nats-token",
	"NATSCreds":   "--nats-creds",
	"NATSNKey":    "--nats-nkey",
	"NATSTLSCA":   "--nats-tls-ca",
	"NATSTLSCert": "--nats-tls-cert and --nats-tls-key",
}

// withFlag adds to an error in one of the shaper's settings the flag that
// sets it.
func withFlag(err error) error {
	var ce *shaper.ConfigError
	if errors.As(err, &ce) && configFlags[ce.Field] != "" {
		return fmt.Errorf("%w (see %s)", err, configFlags[ce.Field])
	}
	return err
}

// policyCount says n policies: "1 policy", "3 policies".
func policyCount(n int) string {
	if n == 1 {
		return "1 policy"
	}
	return fmt.Sprintf("%d policies", n)
}
