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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
)

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:  "send",
		Usage: "submit a bounded burst of jobs to a shaper and report outcomes and latency",
		Description: "Submits --jobs jobs (or as many as fit in --duration) for --policy, spread round-robin\n" +
			"over --keys keys, by HTTP POST /v1/jobs/{policy}/{key} or, with --nats-url, by NATS\n" +
			"request to shaper.submit.<policy>.<key>. Prints a summary on stdout when done.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "http", Value: "http://127.0.0.1:8080", Usage: "shaper HTTP base `URL`", EnvVars: envVar("http")},
			&cli.StringFlag{Name: "nats-url", Usage: "submit by NATS request via this server `URL` instead of HTTP", EnvVars: envVar("nats-url")},
			&cli.StringFlag{Name: "policy", Required: true, Usage: "policy `NAME` to submit to", EnvVars: envVar("policy")},
			&cli.IntFlag{Name: "keys", Value: 1, Usage: "number of keys `N`, named <key-prefix>0 … <key-prefix>N-1", EnvVars: envVar("keys")},
			&cli.StringFlag{Name: "key-prefix", Value: "k", Usage: "`PREFIX` of the generated key names", EnvVars: envVar("key-prefix")},
			&cli.StringSliceFlag{Name: "key", Usage: "submit to exactly this `KEY` (repeatable; replaces --keys and --key-prefix)", EnvVars: envVar("key")},
			&cli.IntFlag{Name: "jobs", Value: 100, Usage: "total jobs `N` to submit (0 = until --duration ends)", EnvVars: envVar("jobs")},
			&cli.IntFlag{Name: "concurrency", Value: 16, Usage: "at most `C` requests in flight", EnvVars: envVar("concurrency")},
			&cli.StringFlag{Name: "rate", Usage: "submit at most `RATE` (N/s, N/m, N/<duration>; a bare N means N/s; 0 or empty = as fast as possible)", EnvVars: envVar("rate")},
			&cli.IntFlag{Name: "size", Value: 64, Usage: "payload size in `BYTES`", EnvVars: envVar("size")},
			&cli.DurationFlag{Name: "duration", Usage: "stop submitting after `D` (0 = no cap)", EnvVars: envVar("duration")},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "give up on a request after `D`", EnvVars: envVar("timeout")},
			&cli.BoolFlag{Name: "idempotency", Usage: "send an Idempotency-Key header with every job", EnvVars: envVar("idempotency")},
			&cli.BoolFlag{Name: "progress", Usage: "print progress on stderr every second even when it is not a terminal", EnvVars: envVar("progress")},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON", EnvVars: envVar("json")},
		},
		Action: func(c *cli.Context) error {
			cfg, err := sendConfigFrom(c)
			if err != nil {
				return err
			}
			return runSend(c.Context, cfg, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// sendConfig is what one send run does.
type sendConfig struct {
	httpURL     string // used when natsURL is empty
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
}

func sendConfigFrom(c *cli.Context) (sendConfig, error) {
	cfg := sendConfig{
		httpURL:     strings.TrimRight(c.String("http"), "/"),
		natsURL:     c.String("nats-url"),
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
	}
	switch {
	case cfg.natsURL != "" && c.IsSet("http"):
		return cfg, errors.New("send: use --http or --nats-url, not both")
	case cfg.policy == "":
		return cfg, errors.New("send: --policy is empty")
	case cfg.jobs < 0:
		return cfg, fmt.Errorf("send: --jobs %d is negative", cfg.jobs)
	case cfg.jobs == 0 && cfg.duration <= 0:
		return cfg, errors.New("send: --jobs 0 needs a --duration, or the run would never end")
	case cfg.duration < 0:
		return cfg, fmt.Errorf("send: --duration %s is negative", cfg.duration)
	case cfg.concurrency < 1:
		return cfg, fmt.Errorf("send: --concurrency %d must be at least 1", cfg.concurrency)
	case cfg.size < 0:
		return cfg, fmt.Errorf("send: --size %d is negative", cfg.size)
	case cfg.timeout <= 0:
		return cfg, fmt.Errorf("send: --timeout %s must be positive", cfg.timeout)
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

// parseInterval turns a --rate value into the pause between submissions:
// 0 for "" or "0", otherwise the interval of policies.ParseRate, where a bare
// number means per second.
func parseInterval(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	if !strings.Contains(s, "/") {
		s += "/s"
	}
	r, err := policies.ParseRate(s)
	if err != nil {
		return 0, err
	}
	return r.Interval(), nil
}

// outcome classifies the answer to one submission.
type outcome int

const (
	outQueued    outcome = iota // 202, or NATS status "queued"
	outRejected                 // 429 without deferral, or NATS "rejected"
	outDeferred                 // 429 with deferred: true, or NATS "deferred"
	outClient                   // any other 4xx
	outServer                   // 5xx
	outError                    // NATS status "error"
	outOther                    // an unexpected status (1xx, 2xx other than 202, 3xx, unknown NATS status)
	outTransport                // no answer: connection, timeout, no responders
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"queued", "rejected", "deferred", "4xx", "5xx", "error", "other", "transport"}

func (o outcome) String() string { return outcomeNames[o] }

// submitter submits one job. detail names the raw answer (an HTTP status
// code, a NATS status or error code) for the summary; err is set for
// outTransport.
type submitter interface {
	submit(ctx context.Context, key, idempotencyKey string, payload []byte) (o outcome, detail string, err error)
}

var (
	_ submitter = (*httpSubmitter)(nil)
	_ submitter = (*natsSubmitter)(nil)
)

// httpSubmitter posts jobs to the shaper's HTTP API.
type httpSubmitter struct {
	c      *client.Client
	policy string
}

func (h *httpSubmitter) submit(ctx context.Context, key, idem string, payload []byte) (outcome, string, error) {
	var res client.Result
	var err error
	if idem != "" {
		res, err = h.c.Submit(ctx, h.policy, key, payload, client.WithIdempotencyKey(idem))
	} else {
		res, err = h.c.Submit(ctx, h.policy, key, payload)
	}
	switch {
	case res.Outcome == client.OutcomeAccepted: // also with a 202 body it could not read
		return outQueued, "202", nil
	case err == nil && res.Outcome == client.OutcomeDeferred:
		return outDeferred, "429 deferred", nil
	case err == nil:
		return outRejected, "429", nil
	}
	var answer *client.Error
	if !errors.As(err, &answer) {
		return outTransport, "transport", err
	}
	detail := strconv.Itoa(answer.StatusCode)
	switch code := answer.StatusCode; {
	case code >= 400 && code < 500:
		return outClient, detail, nil
	case code >= 500:
		return outServer, detail, nil
	}
	return outOther, detail, nil
}

// natsSubmitter requests shaper.submit.<policy>.<key token> with the raw key
// in the Shaper-Key header.
type natsSubmitter struct {
	n      *client.NATS
	policy string
}

func (n *natsSubmitter) submit(ctx context.Context, key, idem string, payload []byte) (outcome, string, error) {
	var res client.Result
	var err error
	if idem != "" {
		res, err = n.n.Submit(ctx, n.policy, key, payload, client.WithIdempotencyKey(idem))
	} else {
		res, err = n.n.Submit(ctx, n.policy, key, payload)
	}
	var answer *client.Error
	switch {
	case err == nil && res.Outcome == client.OutcomeAccepted:
		return outQueued, "queued", nil
	case err == nil && res.Outcome == client.OutcomeDeferred:
		return outDeferred, "deferred", nil
	case err == nil:
		return outRejected, "rejected", nil // rejected or limited: both are status "rejected"
	case errors.As(err, &answer):
		return outError, "error " + strconv.Itoa(answer.StatusCode), nil
	case errors.Is(err, client.ErrBadAnswer):
		return outOther, "bad reply", nil
	case errors.Is(err, nats.ErrNoResponders):
		return outTransport, "no responders", err
	}
	return outTransport, "transport", err
}

// sendSummary is the report of a send run.
type sendSummary struct {
	Target      string           `json:"target"`
	Policy      string           `json:"policy"`
	Keys        int              `json:"keys"`
	Sent        int64            `json:"sent"`
	ElapsedSec  float64          `json:"elapsed_s"`
	PerSec      float64          `json:"throughput_per_s"`
	Outcomes    map[string]int64 `json:"outcomes"`
	Details     map[string]int64 `json:"details"` // by HTTP status code or NATS status
	LatencyMs   latencyMs        `json:"latency_ms"`
	FirstError  string           `json:"first_error,omitempty"`
	Interrupted bool             `json:"interrupted,omitempty"`
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

	mu         sync.Mutex
	details    map[string]int64
	firstError string
}

func (r *sendRun) record(o outcome, detail string, err error) {
	r.counts[o].Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.details[detail]++
	if err != nil && r.firstError == "" {
		r.firstError = err.Error()
	}
}

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
		})
		if err != nil {
			return fmt.Errorf("send: --http: %w", err)
		}
		sub, target = &httpSubmitter{c: c, policy: cfg.policy}, cfg.httpURL
	}

	payload := make([]byte, cfg.size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	runID := rand.Text()[:12]

	// Submission stops when feedCtx ends (--duration); requests in flight
	// then still finish, unless ctx itself ends.
	feedCtx, cancelFeed := ctx, context.CancelFunc(func() {})
	if cfg.duration > 0 {
		feedCtx, cancelFeed = context.WithTimeout(ctx, cfg.duration)
	}
	defer cancelFeed()

	run := &sendRun{details: make(map[string]int64)}
	jobs := make(chan int)
	start := time.Now()
	go func() {
		defer close(jobs)
		next := start
		for i := 0; cfg.jobs == 0 || i < cfg.jobs; i++ {
			if cfg.interval > 0 {
				now := time.Now()
				if next.Before(now.Add(-cfg.interval)) {
					next = now // fell behind: do not make up for it with a burst
				}
				if d := next.Sub(now); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-t.C:
					case <-feedCtx.Done():
						t.Stop()
						return
					}
				}
				next = next.Add(cfg.interval)
			}
			select {
			case jobs <- i:
			case <-feedCtx.Done():
				return
			}
		}
	}()

	var wg sync.WaitGroup
	perWorker := make([][]time.Duration, cfg.concurrency)
	for w := range cfg.concurrency {
		wg.Go(func() {
			for i := range jobs {
				var idem string
				if cfg.idempotency {
					idem = runID + "-" + strconv.Itoa(i)
				}
				t0 := time.Now()
				o, detail, err := sub.submit(ctx, cfg.keys[i%len(cfg.keys)], idem, payload)
				lat := time.Since(t0)
				if ctx.Err() != nil {
					return // interrupted: the answer says nothing about the shaper
				}
				perWorker[w] = append(perWorker[w], lat)
				run.record(o, detail, err)
			}
		})
	}

	stopProgress := func() {}
	if showProgress(stderr, cfg.progress) {
		stopProgress = startSendProgress(stderr, isTerminal(stderr), run, start)
	}
	wg.Wait()
	stopProgress()
	elapsed := time.Since(start)

	var lats []time.Duration
	for _, l := range perWorker {
		lats = append(lats, l...)
	}
	slices.Sort(lats)
	s := sendSummary{
		Target:      target,
		Policy:      cfg.policy,
		Keys:        len(cfg.keys),
		ElapsedSec:  elapsed.Seconds(),
		Outcomes:    make(map[string]int64, numOutcomes),
		Details:     run.details,
		FirstError:  run.firstError,
		Interrupted: ctx.Err() != nil,
		LatencyMs: latencyMs{
			P50: ms(percentile(lats, 0.50)),
			P90: ms(percentile(lats, 0.90)),
			P99: ms(percentile(lats, 0.99)),
		},
	}
	if len(lats) > 0 {
		s.LatencyMs.Max = ms(lats[len(lats)-1])
	}
	for o := range numOutcomes {
		n := run.counts[o].Load()
		s.Outcomes[o.String()] = n
		s.Sent += n
	}
	if elapsed > 0 {
		s.PerSec = float64(s.Sent) / elapsed.Seconds()
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	printSendSummary(stdout, s)
	return nil
}

// startSendProgress prints a progress line on w once a second until the
// returned stop is called. On a terminal the line is rewritten in place.
func startSendProgress(w io.Writer, tty bool, run *sendRun, start time.Time) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last int64
		lastAt := start
		for {
			select {
			case <-done:
				if tty {
					fmt.Fprintln(w)
				}
				return
			case now := <-t.C:
				var c [numOutcomes]int64
				var sent int64
				for o := range numOutcomes {
					c[o] = run.counts[o].Load()
					sent += c[o]
				}
				rate := float64(sent-last) / now.Sub(lastAt).Seconds()
				last, lastAt = sent, now
				line := fmt.Sprintf("%5.0fs  sent %d  %.0f/s  202 %d  429 %d (deferred %d)  other %d",
					now.Sub(start).Seconds(), sent, rate, c[outQueued], c[outRejected]+c[outDeferred], c[outDeferred],
					sent-c[outQueued]-c[outRejected]-c[outDeferred])
				if tty {
					fmt.Fprintf(w, "\r%s\033[K", line)
				} else {
					fmt.Fprintln(w, line)
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

func printSendSummary(w io.Writer, s sendSummary) {
	fmt.Fprintf(w, "sent %d jobs for policy %s over %d keys to %s in %.2fs: %.1f/s\n",
		s.Sent, s.Policy, s.Keys, s.Target, s.ElapsedSec, s.PerSec)
	if s.Interrupted {
		fmt.Fprintln(w, "interrupted: requests in flight were not counted")
	}
	for o := range numOutcomes {
		if n := s.Outcomes[o.String()]; n > 0 || o <= outDeferred {
			fmt.Fprintf(w, "  %-10s %d\n", o, n)
		}
	}
	if len(s.Details) > 0 {
		keys := make([]string, 0, len(s.Details))
		for k := range s.Details {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s: %d", k, s.Details[k])
		}
		fmt.Fprintf(w, "answers: %s\n", strings.Join(parts, ", "))
	}
	l := s.LatencyMs
	fmt.Fprintf(w, "latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", l.P50, l.P90, l.P99, l.Max)
	if s.FirstError != "" {
		fmt.Fprintf(w, "first error: %s\n", s.FirstError)
	}
}
