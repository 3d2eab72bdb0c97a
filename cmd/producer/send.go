package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
)

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:  "send",
		Usage: "submit a bounded burst of jobs to a shaper and report outcomes and latency",
		Description: "Submits --jobs jobs (or as many as fit in --duration) for --policy, spread round-robin\n" +
			"over --keys keys, by HTTP POST /v1/jobs/{policy}/{key} or, with --nats-url, by NATS\n" +
			"request to shaper.submit.<policy>.<key>; with --trace, the jobs of a trace at their times.\n" +
			"Prints a summary on stdout when done.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "http", Value: "http://127.0.0.1:8080", Usage: "the shaper's `URL` (or HOST:PORT, as shaper's commands take it)", EnvVars: envVar("http")},
			&cli.StringFlag{Name: "nats-url", Usage: "submit by NATS request via this server `URL` instead of HTTP", EnvVars: envVar("nats-url")},
			&cli.StringFlag{Name: "token", Usage: "bearer `TOKEN` of a shaper started with --submit-token (HTTP; over NATS, the server's credentials go in --nats-url: nats://TOKEN@HOST:PORT)", EnvVars: envVar("token")},
			&cli.StringFlag{Name: "policy", Required: true, Usage: "policy `NAME` to submit to", EnvVars: envVar("policy")},
			&cli.IntFlag{Name: "keys", Value: 1, Usage: "number of keys `N`, named <key-prefix>0 … <key-prefix>N-1", EnvVars: envVar("keys")},
			&cli.StringFlag{Name: "key-prefix", Value: "k", Usage: "`PREFIX` of the generated key names", EnvVars: envVar("key-prefix")},
			&cli.StringSliceFlag{Name: "key", Usage: "submit to exactly this `KEY` (repeatable; replaces --keys and --key-prefix)", EnvVars: envVar("key")},
			&cli.IntFlag{Name: "jobs", Value: 100, Usage: "total jobs `N` to submit (0 = until --duration ends)", EnvVars: envVar("jobs")},
			&cli.IntFlag{Name: "concurrency", Value: 16, Usage: "at most `C` requests in flight", EnvVars: envVar("concurrency")},
			&cli.StringFlag{Name: "rate", Usage: "submit at most `RATE` (N/s, N/m, N/h, N/d or N/<duration> such as 5/10s; a bare N means N/s; 0 or empty = as fast as possible)", EnvVars: envVar("rate")},
			&cli.IntFlag{Name: "size", Value: 64, Usage: "payload size in `BYTES`", EnvVars: envVar("size")},
			&cli.DurationFlag{Name: "duration", Usage: "stop submitting after `D` (0 = no cap)", EnvVars: envVar("duration")},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "give up on a request after `D`", EnvVars: envVar("timeout")},
			&cli.BoolFlag{Name: "idempotency", Usage: "send an Idempotency-Key header with every job", EnvVars: envVar("idempotency")},
			&cli.StringFlag{Name: "trace", Usage: "submit the jobs of trace `FILE` (see producer trace, shaper record) at their times, with their keys and sizes; replaces --jobs, --keys, --rate and --size", EnvVars: envVar("trace")},
			&cli.TimestampFlag{Name: "start-at", Layout: time.RFC3339Nano, Usage: "start at this wall-clock `TIME` (RFC 3339, e.g. 2026-05-01T10:00:00.5Z) instead of at once: with --trace, the time of its start, to line other clocks up with it", EnvVars: envVar("start-at")},
			&cli.Float64Flag{Name: "speed", Value: 1, Usage: "with --trace, run its clock `X` times faster", EnvVars: envVar("speed")},
			&cli.BoolFlag{Name: "progress", Usage: "print progress on stderr every second even when it is not a terminal", EnvVars: envVar("progress")},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON", EnvVars: envVar("json")},
		},
		Action: func(c *cli.Context) error {
			cfg, err := sendConfigFrom(c)
			if err != nil {
				return cli.Exit("producer send: "+strings.TrimPrefix(err.Error(), "send: "), cmdline.ExitUsage)
			}
			return runSend(c.Context, cfg, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// sendConfig is what one send run does.
type sendConfig struct {
	httpURL     string // used when natsURL is empty
	token       string // --token: the HTTP bearer token
	natsURL     string
	policy      string
	keys        []string
	jobs        int           // 0 = until duration
	concurrency int           // ≥ 1
	interval    time.Duration // between submissions; 0 = unpaced
	size        int
	duration    time.Duration // 0 = no cap
	timeout     time.Duration
	idempotency bool
	progress    bool
	json        bool
	trace       string    // --trace: submit this trace's jobs at their times
	speed       float64   // --speed: the trace's clock runs this much faster
	startAt     time.Time // --start-at: start then, not at once (zero: at once)
}

func sendConfigFrom(c *cli.Context) (sendConfig, error) {
	cfg := sendConfig{
		httpURL:     strings.TrimRight(c.String("http"), "/"),
		natsURL:     c.String("nats-url"),
		token:       c.String("token"),
		policy:      c.String("policy"),
		keys:        c.StringSlice("key"),
		jobs:        c.Int("jobs"),
		concurrency: c.Int("concurrency"),
		size:        c.Int("size"),
		duration:    c.Duration("duration"),
		timeout:     c.Duration("timeout"),
		idempotency: c.Bool("idempotency"),
		progress:    c.Bool("progress"),
		json:        c.Bool("json"),
		trace:       c.String("trace"),
		speed:       c.Float64("speed"),
	}
	if at := c.Timestamp("start-at"); at != nil {
		cfg.startAt = *at
	}
	if cfg.natsURL == "" {
		u, err := baseURL(c.String("http"))
		if err != nil {
			return cfg, fmt.Errorf("send: --http %q: %w", c.String("http"), err)
		}
		cfg.httpURL = u
	}
	switch {
	case cfg.natsURL != "" && c.IsSet("http"):
		msg := "send: use --http or --nats-url, not both"
		if os.Getenv("PRODUCER_NATS_URL") == cfg.natsURL {
			msg += " (--nats-url comes from PRODUCER_NATS_URL, which producer sink reads too: unset it for send, or give send --nats-url '')"
		}
		return cfg, errors.New(msg)
	case cfg.natsURL != "" && cfg.token != "":
		return cfg, errors.New("send: --token is the bearer token of HTTP submissions; over NATS the server's credentials go in --nats-url (nats://TOKEN@HOST:PORT or nats://USER:PASSWORD@HOST:PORT)")
	case cfg.policy == "":
		return cfg, errors.New("send: --policy is empty")
	case cfg.duration < 0:
		return cfg, fmt.Errorf("send: --duration %s is negative", cfg.duration)
	case cfg.concurrency < 1:
		return cfg, fmt.Errorf("send: --concurrency %d must be at least 1", cfg.concurrency)
	case cfg.timeout <= 0:
		return cfg, fmt.Errorf("send: --timeout %s must be positive", cfg.timeout)
	case cfg.trace == "" && c.IsSet("speed"):
		return cfg, errors.New("send: --speed runs a trace's clock faster: it needs --trace (--rate sets the pace of generated jobs)")
	case cfg.trace != "":
		return traceConfig(c, cfg)
	case cfg.jobs < 0:
		return cfg, fmt.Errorf("send: --jobs %d is negative", cfg.jobs)
	case cfg.jobs == 0 && cfg.duration <= 0:
		return cfg, errors.New("send: --jobs 0 needs a --duration, or the run would never end")
	case cfg.size < 0:
		return cfg, fmt.Errorf("send: --size %d is negative", cfg.size)
	}
	if len(cfg.keys) == 0 {
		n := c.Int("keys")
		if n < 1 {
			return cfg, fmt.Errorf("send: --keys %d must be at least 1", n)
		}
		prefix := c.String("key-prefix")
		for i := range n {
			cfg.keys = append(cfg.keys, prefix+strconv.Itoa(i))
		}
	}
	for _, k := range cfg.keys {
		if k == "" {
			return cfg, errors.New("send: a key is empty")
		}
	}
	iv, err := parseInterval(c.String("rate"))
	if err != nil {
		return cfg, fmt.Errorf("send: --rate: %w", err)
	}
	cfg.interval = iv
	return cfg, nil
}

// baseURL is the shaper's base URL that --http gives: a URL (http or
// https), or HOST:PORT as the shaper's own commands take it.
func baseURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	s = strings.TrimRight(s, "/")
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || strings.HasSuffix(u.Host, ":") || u.RawQuery != "" || u.Fragment != "" {
		return "", errors.New("want the shaper's URL, such as http://127.0.0.1:8080, or HOST:PORT")
	}
	if u.Port() != "" {
		if err := cmdline.HostPort(u.Host); err != nil {
			return "", err
		}
	}
	return s, nil
}

// parseInterval turns a --rate value into the pause between submissions:
// 0 for "" or "0", otherwise the interval of policies.ParseRate, where a bare
// number means per second.
func parseInterval(s string) (time.Duration, error) {
	r, err := parseRate(s)
	return r.Interval(), err
}

// parseRate parses a rate flag: the zero Rate for "" or "0", otherwise
// policies.ParseRate, where a bare number means per second.
func parseRate(s string) (policies.Rate, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return policies.Rate{}, nil
	}
	if strings.Contains(s, "/") {
		return policies.ParseRate(s)
	}
	r, err := policies.ParseRate(s + "/s")
	if err != nil {
		return r, fmt.Errorf("%q is not a rate: want a number of jobs a second, or N/s, N/m, N/h", s)
	}
	return r, nil
}

// sendSummary is the report of a send run.
type sendSummary struct {
	Target     string           `json:"target"`
	Policy     string           `json:"policy"`
	Trace      string           `json:"trace,omitempty"`
	Keys       int              `json:"keys"`
	Sent       int64            `json:"sent"`
	ElapsedSec float64          `json:"elapsed_s"`
	PerSec     float64          `json:"throughput_per_s"`
	Outcomes   map[string]int64 `json:"outcomes"`
	Details    map[string]int64 `json:"details"` // by HTTP status code or NATS status
	LatencyMs  latencyMs        `json:"latency_ms"`
	// LateMs is, with --trace, how late submissions started after their
	// time in the trace (all workers were busy, or the machine was).
	LateMs      *latencyMs `json:"late_ms,omitempty"`
	FirstError  string     `json:"first_error,omitempty"`
	Interrupted bool       `json:"interrupted,omitempty"`
}

type latencyMs struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// sendRun is the shared state of the workers of one send run.
type sendRun struct {
	counts [numOutcomes]atomic.Int64

	mu            sync.Mutex
	details       map[string]int64
	firstError    string
	unknownPolicy error       // the shaper does not know the policy: the run stops
	stop          atomic.Bool // set with unknownPolicy
}

func (r *sendRun) record(o outcome, detail string, err error) {
	r.counts[o].Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.details[detail]++
	if err != nil && r.firstError == "" {
		r.firstError = err.Error()
	}
	if errors.Is(err, client.ErrUnknownPolicy) && r.unknownPolicy == nil {
		r.unknownPolicy = err
		r.stop.Store(true)
	}
}

// stopped reports whether the run must stop: the policy is unknown.
func (r *sendRun) stopped() bool { return r.stop.Load() }

func runSend(ctx context.Context, cfg sendConfig, stdout, stderr io.Writer) error {
	var (
		sub    submitter
		target string
	)
	if cfg.natsURL != "" {
		nc, err := nats.Connect(cfg.natsURL, nats.Name("shaper-producer-send"))
		if err != nil {
			return fmt.Errorf("send: connect %s: %w", cfg.natsURL, err)
		}
		defer nc.Close()
		n, err := client.NewNATS(nc, client.NATSConfig{Timeout: cfg.timeout})
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		for _, k := range cfg.keys {
			if _, err := n.Subject(cfg.policy, k); err != nil {
				return fmt.Errorf("send: key %q of policy %q cannot go in a NATS subject: %w", k, cfg.policy, err)
			}
		}
		sub, target = &natsSubmitter{n: n, policy: cfg.policy}, cfg.natsURL
	} else {
		tr := &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        cfg.concurrency,
			MaxIdleConnsPerHost: cfg.concurrency,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		}
		defer tr.CloseIdleConnections()
		c, err := client.New(cfg.httpURL, client.Config{
			HTTPClient: &http.Client{
				Transport: tr,
				Timeout:   cfg.timeout,
				// A redirect is an answer to count, not to follow.
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			},
			UserAgent: "shaper-producer",
			Token:     cfg.token,
		})
		if err != nil {
			return fmt.Errorf("send: --http: %w", err)
		}
		sub, target = &httpSubmitter{c: c, policy: cfg.policy}, cfg.httpURL
	}

	payload := letters(cfg.size)
	runID := rand.Text()[:12]

	// Submission stops when feedCtx ends (--duration); requests in flight
	// then still finish, unless ctx itself ends.
	feedCtx, cancelFeed := ctx, context.CancelFunc(func() {})
	if cfg.duration > 0 {
		feedCtx, cancelFeed = context.WithTimeout(ctx, cfg.duration)
	}
	defer cancelFeed()

	run := &sendRun{details: make(map[string]int64)}
	jobs := make(chan sendJob)
	if !cfg.startAt.IsZero() && !sleepUntil(ctx, cfg.startAt) {
		return fmt.Errorf("send: interrupted before --start-at %s", cfg.startAt.Format(time.RFC3339Nano))
	}
	start := time.Now()
	if !cfg.startAt.IsZero() {
		start = cfg.startAt // a trace's times count from it, even if the start was missed by a little
	}
	var (
		feedErr   error
		traceKeys int // the keys of the trace sent
	)
	feedDone := make(chan struct{})
	go func() {
		defer close(feedDone)
		defer close(jobs)
		if cfg.trace != "" {
			traceKeys, feedErr = feedTrace(feedCtx, cfg.trace, cfg.speed, start, jobs)
			return
		}
		feedCount(feedCtx, cfg, start, payload, jobs)
	}()

	var wg sync.WaitGroup
	perWorker := make([][]time.Duration, cfg.concurrency)
	lateness := make([][]time.Duration, cfg.concurrency)
	for w := range cfg.concurrency {
		wg.Go(func() {
			for job := range jobs {
				if run.stopped() {
					continue // the feed ends soon
				}
				var idem string
				if cfg.idempotency {
					idem = runID + "-" + strconv.Itoa(job.i)
				}
				t0 := time.Now()
				if !job.due.IsZero() {
					lateness[w] = append(lateness[w], t0.Sub(job.due))
				}
				o, detail, err := sub.submit(ctx, job.key, idem, job.payload)
				lat := time.Since(t0)
				if ctx.Err() != nil {
					return // interrupted: the answer says nothing about the shaper
				}
				perWorker[w] = append(perWorker[w], lat)
				run.record(o, detail, err)
				if run.stopped() {
					cancelFeed() // no use sending the rest
				}
			}
		})
	}

	stopProgress := func() {}
	if showProgress(stderr, cfg.progress) {
		stopProgress = startSendProgress(stderr, cmdline.IsTerminal(stderr), run, start)
	}
	wg.Wait()
	stopProgress()
	elapsed := time.Since(start)
	<-feedDone
	if feedErr != nil {
		return fmt.Errorf("send: --trace: %w", feedErr)
	}

	s := sendSummary{
		Target:      target,
		Policy:      cfg.policy,
		Trace:       cfg.trace,
		Keys:        len(cfg.keys),
		ElapsedSec:  elapsed.Seconds(),
		Outcomes:    make(map[string]int64, numOutcomes),
		Details:     run.details,
		FirstError:  run.firstError,
		Interrupted: ctx.Err() != nil,
		LatencyMs:   latencyOf(perWorker),
	}
	if cfg.trace != "" {
		s.Keys = traceKeys
		late := latencyOf(lateness)
		s.LateMs = &late
	}
	for o := range numOutcomes {
		n := run.counts[o].Load()
		s.Outcomes[o.String()] = n
		s.Sent += n
	}
	if elapsed > 0 {
		s.PerSec = float64(s.Sent) / elapsed.Seconds()
	}
	if run.unknownPolicy != nil {
		var answer *client.Error
		detail := fmt.Sprintf("unknown policy %q", cfg.policy)
		if errors.As(run.unknownPolicy, &answer) && answer.Problem.Detail != "" {
			detail = answer.Problem.Detail
		}
		return cli.Exit("producer send: "+detail+": no job was stored", cmdline.ExitUsage)
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			return err
		}
	} else {
		printSendSummary(stdout, s)
	}
	return failures(s)
}
