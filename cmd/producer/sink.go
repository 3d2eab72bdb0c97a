package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/client"
)

func sinkCommand() *cli.Command {
	return &cli.Command{
		Name:  "sink",
		Usage: "receive a shaper's deliveries and measure how smooth they are, per key",
		Description: "Subscribes to --subject, answers every delivery that has a reply subject with an empty\n" +
			"message (confirmed delivery), and reports per key: deliveries, distinct job ids,\n" +
			"duplicates, achieved rate, gaps between deliveries, the most deliveries in any\n" +
			"1-second window, and time in queue (receive time minus Shaper-Enqueued-At).\n" +
			"Progress goes to stderr: a live line on a terminal, a line every 10 s otherwise;\n" +
			"--fail-every N leaves every N-th delivery unanswered (counted apart, not as a delivery);\n" +
			"a lost and a regained NATS connection are said there too.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "nats-url", Value: "nats://127.0.0.1:4222", Usage: "NATS server `URL`", EnvVars: envVar("nats-url")},
			&cli.StringFlag{Name: "subject", Value: "shaper.out.>", Usage: "`SUBJECT` to receive deliveries on", EnvVars: envVar("subject")},
			&cli.DurationFlag{Name: "duration", Usage: "stop after `D` (0 = until interrupted)", EnvVars: envVar("duration")},
			&cli.IntFlag{Name: "expect", Usage: "stop after `N` distinct job ids (0 = no limit)", EnvVars: envVar("expect")},
			&cli.BoolFlag{Name: "print", Usage: "print every delivery as a line on stdout (a JSON line with --json)", EnvVars: envVar("print")},
			&cli.BoolFlag{Name: "progress", Usage: "print a progress line on stderr every second also when it is not a terminal (otherwise every 10 s there)", EnvVars: envVar("progress")},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON", EnvVars: envVar("json")},
			&cli.IntFlag{Name: "fail-every", Usage: "leave every `N`-th delivery unanswered, so that the shaper's attempt fails (after its deliver.timeout) and is retried, or dead-lettered once out of attempts: to try retries and dead letters (1: every one; 0: none)", EnvVars: envVar("fail-every")},
		},
		Action: func(c *cli.Context) error {
			cfg := sinkConfig{
				natsURL:   c.String("nats-url"),
				subject:   c.String("subject"),
				duration:  c.Duration("duration"),
				expect:    c.Int("expect"),
				print:     c.Bool("print"),
				progress:  c.Bool("progress"),
				json:      c.Bool("json"),
				failEvery: c.Int("fail-every"),
			}
			switch {
			case cfg.duration < 0:
				return cli.Exit(fmt.Sprintf("producer sink: --duration %s is negative: want 0 (until interrupted) or more", cfg.duration), cmdline.ExitUsage)
			case cfg.expect < 0:
				return cli.Exit(fmt.Sprintf("producer sink: --expect %d is negative: want 0 (no limit) or more", cfg.expect), cmdline.ExitUsage)
			case cfg.failEvery < 0:
				return cli.Exit(fmt.Sprintf("producer sink: --fail-every %d: want 0 (answer every delivery) or more", cfg.failEvery), cmdline.ExitUsage)
			}
			return runSink(c.Context, cfg, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// sinkConfig is what one sink run does.
type sinkConfig struct {
	natsURL  string
	subject  string
	duration time.Duration // 0 = until ctx ends
	expect   int           // 0 = no limit
	print    bool
	progress bool
	json     bool
	// failEvery > 0 leaves every failEvery-th delivery asking for an
	// answer unanswered.
	failEvery int
}

// sinkTopKeys is how many keys the table shows, busiest first.
const sinkTopKeys = 20

// meter holds the stats of every key and of all deliveries together. It is
// safe for concurrent use.
type meter struct {
	mu      sync.Mutex
	keys    map[policyKey]*keyStats
	total   keyStats
	stopped bool
	asked   int // deliveries asking for an answer
	failed  int // of them, left unanswered (--fail-every)
}

// answer reports whether a delivery asking for an answer gets one: all
// but every failEvery-th (none when failEvery is 0). One left unanswered
// is counted apart, not as a delivery.
func (m *meter) answer(failEvery int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked++
	if failEvery > 0 && m.asked%failEvery == 0 && !m.stopped {
		m.failed++
		return false
	}
	return true
}

// delivery is one received message as the sink sees it.
type delivery struct {
	At       time.Time `json:"at"`
	Subject  string    `json:"subject"`
	Key      string    `json:"key"`
	ID       string    `json:"id"`
	Policy   string    `json:"policy,omitempty"`
	Attempt  string    `json:"attempt,omitempty"`
	Enqueued time.Time `json:"-"`
	// LatencyMs is the queue latency, omitted when Shaper-Enqueued-At is missing.
	LatencyMs *float64 `json:"latency_ms,omitempty"`
}

func parseDelivery(m *nats.Msg, at time.Time) delivery {
	d := delivery{At: at, Subject: m.Subject, Key: m.Subject}
	if m.Header == nil {
		return d
	}
	if k := m.Header.Values(client.HeaderKey); len(k) > 0 {
		d.Key = k[0] // may be empty: the header is authoritative
		// unless it is the header's form of the key of the subject's last
		// token (a line break or white space at an end it cannot carry).
		if key, err := queue.DecodeKey(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]); err == nil && key != d.Key && queue.HeaderForm(key) == d.Key {
			d.Key = key
		}
	}
	d.ID = m.Header.Get(client.HeaderJobID)
	d.Policy = m.Header.Get(client.HeaderPolicy)
	d.Attempt = m.Header.Get(client.HeaderAttempt)
	if t, err := time.Parse(time.RFC3339Nano, m.Header.Get(client.HeaderEnqueuedAt)); err == nil {
		d.Enqueued = t
		l := ms(at.Sub(t))
		d.LatencyMs = &l
	}
	return d
}

// add records d and returns the number of distinct job ids seen so far, or
// -1 once the meter is stopped.
func (m *meter) add(d delivery) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return -1
	}
	pk := policyKey{d.Policy, d.Key} // one key's pace is per policy
	ks := m.keys[pk]
	if ks == nil {
		ks = new(keyStats)
		m.keys[pk] = ks
	}
	ks.add(d.ID, d.At, d.Enqueued)
	m.total.add(d.ID, d.At, d.Enqueued)
	return m.total.distinct()
}

// policyKey names one stream of a key's deliveries: keys of the same name
// in two policies are paced apart.
type policyKey struct{ policy, key string }

// sinkReport is what the sink prints at the end.
type sinkReport struct {
	Subject    string       `json:"subject"`
	ElapsedSec float64      `json:"elapsed_s"`
	StoppedBy  string       `json:"stopped_by"`           // "expect", "duration" or "interrupt"
	Unanswered int          `json:"unanswered,omitempty"` // deliveries left unanswered (--fail-every), not counted in the rest
	Keys       int          `json:"keys"`
	Totals     keySummary   `json:"totals"`
	PerKey     []keySummary `json:"per_key"` // every key, most deliveries first
}

// stop freezes the meter and reports it.
func (m *meter) stop() (totals keySummary, perKey []keySummary) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	totals = m.total.summary("(all)")
	perKey = make([]keySummary, 0, len(m.keys))
	for k, ks := range m.keys {
		s := ks.summary(k.key)
		s.Policy = k.policy
		perKey = append(perKey, s)
	}
	slices.SortFunc(perKey, func(a, b keySummary) int {
		return cmp.Or(cmp.Compare(b.Deliveries, a.Deliveries), cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Key, b.Key))
	})
	return totals, perKey
}

// sinkProgressEvery is how often progress lines are printed when stderr
// is not a terminal (and --progress is not given).
const sinkProgressEvery = 10 * time.Second

func runSink(ctx context.Context, cfg sinkConfig, stdout, stderr io.Writer) error {
	tty := cmdline.IsTerminal(stderr)
	errOut := &lineWriter{w: stderr, tty: tty}
	nc, err := nats.Connect(cfg.natsURL, nats.Name("shaper-producer-sink"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil || nc.IsClosed() {
				return // the sink closing its connection
			}
			errOut.say(fmt.Sprintf("sink: lost the connection to NATS (%v): reconnecting; deliveries published meanwhile are not seen", err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			errOut.say("sink: reconnected to " + nc.ConnectedUrl())
		}))
	if err != nil {
		return fmt.Errorf("sink: connect %s: %w", cfg.natsURL, err)
	}
	defer nc.Close()

	m := &meter{keys: make(map[policyKey]*keyStats)}
	expected := make(chan struct{})
	var once sync.Once
	var outMu sync.Mutex // serializes --print lines
	enc := json.NewEncoder(stdout)

	sub, err := nc.Subscribe(cfg.subject, func(msg *nats.Msg) {
		at := time.Now()
		if msg.Reply != "" {
			if !m.answer(cfg.failEvery) {
				return // its attempt fails: it comes again
			}
			_ = msg.Respond(nil) // confirmed delivery: an empty answer
		}
		d := parseDelivery(msg, at)
		n := m.add(d)
		if n < 0 {
			return
		}
		if cfg.print {
			outMu.Lock()
			printDelivery(stdout, enc, cfg.json, d)
			outMu.Unlock()
		}
		if cfg.expect > 0 && n >= cfg.expect {
			once.Do(func() { close(expected) })
		}
	})
	if err != nil {
		return fmt.Errorf("sink: subscribe %q: %w", cfg.subject, err)
	}
	// Never drop deliveries on the client side: a slow sink would measure gaps that are not there.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return fmt.Errorf("sink: pending limits: %w", err)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("sink: subscribe %q: %w", cfg.subject, err)
	}
	start := time.Now()

	every := sinkProgressEvery
	if tty || cfg.progress {
		every = time.Second
	}
	stopProgress := startSinkProgress(errOut, every, m, start)
	var timeout <-chan time.Time
	if cfg.duration > 0 {
		t := time.NewTimer(cfg.duration)
		defer t.Stop()
		timeout = t.C
	}
	r := sinkReport{Subject: cfg.subject}
	select {
	case <-expected:
		r.StoppedBy = "expect"
	case <-timeout:
		r.StoppedBy = "duration"
	case <-ctx.Done():
		r.StoppedBy = "interrupt"
	}
	_ = sub.Unsubscribe()
	stopProgress()
	r.ElapsedSec = time.Since(start).Seconds()
	r.Totals, r.PerKey = m.stop()
	r.Keys = len(r.PerKey)
	r.Unanswered = m.failed

	outMu.Lock()
	defer outMu.Unlock()
	if cfg.json {
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return printSinkReport(stdout, r)
}

func printDelivery(w io.Writer, enc *json.Encoder, asJSON bool, d delivery) {
	if asJSON {
		_ = enc.Encode(d)
		return
	}
	lat := "-"
	if d.LatencyMs != nil {
		lat = fmt.Sprintf("%.1fms", *d.LatencyMs)
	}
	fmt.Fprintf(w, "%s key=%q id=%s attempt=%s latency=%s subject=%s\n",
		d.At.Format("15:04:05.000000"), d.Key, d.ID, d.Attempt, lat, d.Subject)
}

// startSinkProgress prints a progress line on w every interval until the
// returned stop is called. On a terminal the line is rewritten in place.
func startSinkProgress(w *lineWriter, every time.Duration, m *meter, start time.Time) (stop func()) {
	last, lastAt := 0, start
	return startProgress(w, every, func(now time.Time) string {
		m.mu.Lock()
		n, keys, dups, failed := m.total.deliveries, len(m.keys), m.total.duplicates, m.failed
		m.mu.Unlock()
		line := fmt.Sprintf("%5.0fs  delivered %d  %.0f/s  keys %d  duplicates %d",
			now.Sub(start).Seconds(), n, float64(n-last)/now.Sub(lastAt).Seconds(), keys, dups)
		if failed > 0 {
			line += fmt.Sprintf("  unanswered %d", failed)
		}
		last, lastAt = n, now
		return line
	})
}

// startProgress prints the line that line returns on w every interval,
// until the returned stop is called; line is called from one goroutine.
func startProgress(w *lineWriter, every time.Duration, line func(now time.Time) string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				w.end()
				return
			case now := <-t.C:
				w.progress(line(now))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// lineWriter writes progress and messages to w from several goroutines: on
// a terminal the progress line is rewritten in place and a message clears
// it first; otherwise each is a line of its own.
type lineWriter struct {
	mu   sync.Mutex
	w    io.Writer
	tty  bool
	live bool // a progress line is on the terminal, not ended
}

func (l *lineWriter) progress(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tty {
		fmt.Fprintf(l.w, "\r%s\033[K", line)
		l.live = true
	} else {
		fmt.Fprintln(l.w, line)
	}
}

func (l *lineWriter) say(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live {
		fmt.Fprint(l.w, "\r\033[K")
		l.live = false
	}
	fmt.Fprintln(l.w, msg)
}

// end ends a live progress line.
func (l *lineWriter) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live {
		fmt.Fprintln(l.w)
		l.live = false
	}
}

func printSinkReport(w io.Writer, r sinkReport) error {
	fmt.Fprintf(w, "%s: %d deliveries of %d distinct jobs (%d duplicates) over %d keys in %.2fs, stopped by %s\n",
		r.Subject, r.Totals.Deliveries, r.Totals.Distinct, r.Totals.Duplicates, r.Keys, r.ElapsedSec, r.StoppedBy)
	if r.Unanswered > 0 {
		fmt.Fprintf(w, "%d more deliveries left unanswered (--fail-every), so that their attempts fail: not counted above\n", r.Unanswered)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\tkey\tdeliveries\tdistinct\tdups\trate/s\tgap min ms\tgap p50 ms\tgap p99 ms\tmax in 1s\tin queue p50 ms\tin queue p99 ms")
	row := func(s keySummary) {
		fmt.Fprintf(tw, "%s\t%q\t%d\t%d\t%d\t%.3f\t%.2f\t%.2f\t%.2f\t%d\t%.2f\t%.2f\n",
			cmp.Or(s.Policy, "-"), s.Key, s.Deliveries, s.Distinct, s.Duplicates, s.BusyRatePerSec,
			s.GapMinMs, s.GapP50Ms, s.GapP99Ms, s.MaxPerSecond, s.LatencyP50Ms, s.LatencyP99Ms)
	}
	for _, s := range r.PerKey[:min(len(r.PerKey), sinkTopKeys)] {
		row(s)
	}
	t := r.Totals
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%d\t%.3f\t%.2f\t%.2f\t%.2f\t%d\t%.2f\t%.2f\n",
		t.Deliveries, t.Distinct, t.Duplicates, t.BusyRatePerSec,
		t.GapMinMs, t.GapP50Ms, t.GapP99Ms, t.MaxPerSecond, t.LatencyP50Ms, t.LatencyP99Ms)
	if err := tw.Flush(); err != nil {
		return err
	}
	if slices.ContainsFunc(r.PerKey, func(s keySummary) bool { return s.IdleGaps > 0 }) {
		fmt.Fprintln(w, "rate/s leaves out idle time: a gap over twice the key's median gap, and over 1 s (over the whole span: rate_per_s of --json)")
	}
	if more := len(r.PerKey) - sinkTopKeys; more > 0 {
		_, err := fmt.Fprintf(w, "(%d more keys not shown; --json lists every key)\n", more)
		return err
	}
	return nil
}
