package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// bench is one run's shared state: its configuration, its temporary
// directory, its children and the binaries they run.
type bench struct {
	cfg    config
	dir    string
	g      *benchkit.Group
	self   string // this program, re-executed for the roles
	shaper string
	nats   string
	logf   func(format string, a ...any) // progress, on stderr
}

// row is one measurement: deliveries counted over secs, and the CPU seconds
// each process used meanwhile.
type row struct {
	what     string
	n        int
	secs     float64
	server   []usage // counted as the server side
	consumer float64 // CPU seconds of the consumer
	dups     int
	paced    bool
	bare     bool    // the bare hand-off (handoffPaced): neither a floor nor the shaper
	want     float64 // the rate pacing should reach (paced rows)
}

type usage struct {
	name string
	cpu  float64 // seconds
}

func (r row) rate() float64 { return float64(r.n) / r.secs }

// cpuPer returns the server side's CPU-µs per delivery.
func (r row) cpuPer() float64 {
	var s float64
	for _, u := range r.server {
		s += u.cpu
	}
	return s * 1e6 / float64(r.n)
}

// openConsumer starts the consumer role answering on subject from its
// first request on (not held until the clock starts).
func (b *bench) openConsumer(ctx context.Context, name, url, subject string) (*benchkit.Proc, error) {
	c, err := b.startConsumer(ctx, name, url, subject, 0)
	if err != nil {
		return nil, err
	}
	if err := c.Send("go"); err != nil {
		c.Stop(5 * time.Second)
		return nil, err
	}
	return c, nil
}

// startConsumer starts the consumer role answering on subject.
func (b *bench) startConsumer(ctx context.Context, name, url, subject string, expect int) (*benchkit.Proc, error) {
	c, err := b.g.StartRole(name, b.self, roleConsumer, "-nats-url", url, "-subject", subject, "-expect", strconv.Itoa(expect))
	if err != nil {
		return nil, err
	}
	_, err = c.Expect(ctx, "ready", time.Minute)
	return c, err
}

// unpaced starts the clock by sending "go" to release: the consumer c
// holding the first deliveries of a full pipeline (it waits for the first
// to arrive), or a floor worker that has not fetched yet. It waits until c
// has taken every job, and returns the row with the CPU time of server
// (the server side) and of the consumer meanwhile. during runs from the
// release on; the row waits for it, and its error fails the row.
func (b *bench) unpaced(ctx context.Context, what string, c, release *benchkit.Proc, server []*benchkit.Proc, jobs int, during func() error) (row, error) {
	if release == c {
		if _, err := c.Expect(ctx, "first", benchkit.Phase(jobs)); err != nil {
			return row{}, err
		}
	}
	all := append(server[:len(server):len(server)], c)
	if err := settle(ctx, all, 10*time.Second); err != nil {
		return row{}, err
	}
	t0 := time.Now()
	c0, err := sample(all)
	if err != nil {
		return row{}, err
	}
	if err := release.Send("go"); err != nil {
		return row{}, err
	}
	done := make(chan error, 1)
	go func() { done <- during() }()
	rest, err := c.Expect(ctx, "done", benchkit.Phase(jobs))
	if err != nil {
		return row{}, err
	}
	secs := time.Since(t0).Seconds()
	c1, err := sample(all)
	if err != nil {
		return row{}, err
	}
	if err := <-done; err != nil {
		return row{}, fmt.Errorf("%s: %w", what, err)
	}
	r := row{what: what, secs: secs}
	if _, err := fmt.Sscan(rest, &r.n, &r.dups); err != nil {
		return row{}, fmt.Errorf("consumer said done %q: %v", rest, err)
	}
	for i, p := range server {
		r.server = append(r.server, usage{p.Name, float64(c1[i]-c0[i]) / benchkit.ClockTicks})
	}
	r.consumer = float64(c1[len(server)]-c0[len(server)]) / benchkit.ClockTicks
	return r, nil
}

// floor measures the NATS floor: n jobs preloaded into a work-queue stream
// of its own on the standalone nats-server, delivered by the worker role.
func (b *bench) floor(ctx context.Context, ns *benchkit.Proc, url string, js jetstream.JetStream, name string, await bool) (row, error) {
	cfg := b.cfg
	if err := b.preload(ctx, js, name, cfg.jobs, cfg.keys); err != nil {
		return row{}, err
	}
	c, err := b.startConsumer(ctx, name+"-consumer", url, name+".out.>", cfg.jobs)
	if err != nil {
		return row{}, err
	}
	defer c.Stop(5 * time.Second)
	if err := c.Send("go"); err != nil { // the worker holds the pipeline instead
		return row{}, err
	}
	w, err := b.startWorker(ctx, name, url, await, 0)
	if err != nil {
		return row{}, err
	}
	defer w.Stop(5 * time.Second)
	acks := "acks confirmed"
	if !await {
		acks = "acks not awaited"
	}
	what := fmt.Sprintf("floor: JetStream work-queue pull consumer, batches of %d, %d in flight, %s", cfg.batch, cfg.fetchers, acks)
	return b.unpaced(ctx, what, c, w, []*benchkit.Proc{ns, w}, cfg.jobs, func() error { return nil })
}

// floorPaced measures the NATS floor handing off at the paced run's rate
// (-paced-keys × -paced-rate a second, evenly spaced, acks confirmed):
// what a plain pull consumer pays per delivery when deliveries come one at
// a time instead of in bursts.
func (b *bench) floorPaced(ctx context.Context, ns *benchkit.Proc, url string, js jetstream.JetStream, name string) (row, error) {
	cfg := b.cfg
	rate := cfg.pacedKeys * cfg.pacedRate
	jobs := cfg.pacedKeys * b.pacedPerKey()
	if err := b.preload(ctx, js, name, jobs, cfg.pacedKeys); err != nil {
		return row{}, err
	}
	c, err := b.openConsumer(ctx, name+"-consumer", url, name+".out.>")
	if err != nil {
		return row{}, err
	}
	defer c.Stop(5 * time.Second)
	w, err := b.startWorker(ctx, name, url, true, rate)
	if err != nil {
		return row{}, err
	}
	defer w.Stop(5 * time.Second)
	what := fmt.Sprintf("floor, paced: the same pull consumer handing off %d/s evenly spaced, acks confirmed", rate)
	return b.paced(ctx, what, c, []*benchkit.Proc{ns, w}, func() error { return w.Send("go") }, func() error { return nil })
}

// preload creates the work-queue stream of floor run name and stores jobs
// messages in it over keys subjects (<name>.q.k<j mod keys>).
func (b *bench) preload(ctx context.Context, js jetstream.JetStream, name string, jobs, keys int) error {
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      strings.ToUpper(name),
		Subjects:  []string{name + ".q.>"},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	payload := bytes.Repeat([]byte("x"), b.cfg.payload)
	for j := range jobs {
		if _, err := js.PublishAsync(fmt.Sprintf("%s.q.k%d", name, j%keys), payload, jetstream.WithStallWait(10*time.Second)); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-time.After(benchkit.Phase(jobs)):
		return fmt.Errorf("preload: %d publishes not acknowledged", js.PublishAsyncPending())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startWorker starts the worker role of floor run name, handing off rate
// messages a second (0: unpaced), and waits until it is ready.
func (b *bench) startWorker(ctx context.Context, name, url string, await bool, rate int) (*benchkit.Proc, error) {
	w, err := b.g.StartRole(name+"-worker", b.self, roleWorker, "-nats-url", url, "-stream", strings.ToUpper(name),
		"-in", name+".q", "-out", name+".out", "-await-ack="+strconv.FormatBool(await),
		"-fetchers", strconv.Itoa(b.cfg.fetchers), "-batch", strconv.Itoa(b.cfg.batch), "-rate", strconv.Itoa(rate))
	if err != nil {
		return nil, err
	}
	if _, err := w.Expect(ctx, "ready", time.Minute); err != nil {
		w.Stop(5 * time.Second)
		return nil, err
	}
	return w, nil
}

// startNATS starts the standalone nats-server with JetStream on a store in
// the run's directory and connects to it.
func (b *bench) startNATS(ctx context.Context) (*benchkit.Proc, *nats.Conn, string, error) {
	port, err := benchkit.FreePort()
	if err != nil {
		return nil, nil, "", err
	}
	ns, err := b.g.Start("nats-server", b.nats, "-a", "127.0.0.1", "-p", strconv.Itoa(port),
		"-js", "-sd", filepath.Join(b.dir, "nats-store"))
	if err != nil {
		return nil, nil, "", err
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(url, nats.Name("floor-loader"))
		if err == nil {
			return ns, nc, url, nil
		}
		select {
		case <-ns.Done():
			return nil, nil, "", fmt.Errorf("nats-server exited; its log:\n%s", ns.Tail())
		case <-ctx.Done():
			return nil, nil, "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, nil, "", fmt.Errorf("nats-server: %w", err)
		}
	}
}

// startShaper starts a shaper serve of the binary bin, on its own (free
// ports and a data directory of its own) with policy name, on its embedded
// JetStream or, with natsURL, on that server, and waits until it is ready.
func (b *bench) startShaper(ctx context.Context, name, bin, outflow string, queue int, natsURL string) (*benchkit.Shaper, error) {
	var args []string
	if b.cfg.workers > 0 {
		args = append(args, "--workers", strconv.Itoa(b.cfg.workers))
	}
	s, err := b.g.StartShaper(benchkit.ShaperConfig{
		Name:       "shaper-" + name,
		Bin:        bin,
		PolicyFile: filepath.Join(b.dir, name+".yaml"),
		Policy:     benchkit.Policy(name, outflow, queue, b.cfg.partitions),
		Data:       filepath.Join(b.dir, "data-"+name),
		LogLevel:   "warn",
		Args:       args,
		NATSURL:    natsURL,
	})
	if err != nil {
		return nil, err
	}
	if _, err := s.AwaitReady(ctx, 100*time.Millisecond, time.Minute); err != nil {
		return nil, err
	}
	return s, nil
}

// stopWith stops the shaper, then its consumer c: the deliveries in
// flight are answered, so the shaper stops without waiting for them.
func stopWith(s *benchkit.Shaper, c *benchkit.Proc) {
	c.Send("go")
	s.P.Stop(15 * time.Second)
	c.Stop(5 * time.Second)
}

// spreadSeed is how many jobs of each key Seed admits before the rest: the
// key's next slot then finds a job, and the key keeps its phase until the
// rest come.
const spreadSeed = 2

// spreadFill is how many seconds of a key's jobs a spread run adds for the
// time it takes to admit them, as its keys deliver meanwhile.
const spreadFill = 15

// pacedPerKey is how many jobs a key of a paced run is preloaded with: its
// queue must not run dry before the measurement ends.
func (b *bench) pacedPerKey() int {
	cfg := b.cfg
	return int(float64(cfg.pacedRate)*(cfg.pacedWarmup+cfg.pacedDuration).Seconds()) + 3*cfg.pacedRate
}

// shaperPaced measures the shaper delivering pacedKeys keys at pacedRate
// a second each from a queue that never runs dry: the CPU per delivery and
// the rate reached over pacedDuration, after pacedWarmup. With ns, the
// shaper uses that standalone nats-server (at url) instead of its embedded
// one, and the server side counts both, as for the floor. The keys' slots
// fall together (the consumer holds every key's first delivery until the
// clock starts, then answers them at once), or, spread, one key's every
// period/keys: the consumer answers from the start and key i's first jobs
// are admitted at i/keys of a period, as the floor's evenly spaced
// hand-offs.
func (b *bench) shaperPaced(ctx context.Context, name string, ns *benchkit.Proc, url string, spread bool) (row, error) {
	cfg := b.cfg
	perKey := b.pacedPerKey()
	if spread { // delivering already while the rest are admitted: enough for a slow fill too
		perKey += spreadFill * cfg.pacedRate
	}
	jobs := perKey * cfg.pacedKeys
	s, err := b.startShaper(ctx, name, b.shaper, fmt.Sprintf("%d/s", cfg.pacedRate), min(1_000_000, 2*perKey), url)
	if err != nil {
		return row{}, err
	}
	c, err := b.startConsumer(ctx, name+"-consumer", s.NATSURL, "shaper.out."+name+".>", 0)
	if err != nil {
		s.P.Stop(15 * time.Second)
		return row{}, err
	}
	defer stopWith(s, c)
	start := time.Now()
	release := func() error { return c.Send("go") }
	if spread {
		if err := release(); err != nil {
			return row{}, err
		}
		release = nil // running already
		over := time.Second / time.Duration(cfg.pacedRate)
		if err := s.Seed(ctx, name, cfg.pacedKeys, spreadSeed, cfg.payload, over, 32); err != nil {
			return row{}, fmt.Errorf("first jobs: %w", err)
		}
		jobs -= spreadSeed * cfg.pacedKeys
	}
	if err := s.Submit(ctx, name, jobs, cfg.pacedKeys, cfg.payload, 32); err != nil {
		return row{}, fmt.Errorf("preload: %w", err)
	}
	b.logf("shaper, %s: %d jobs admitted in %.1f s", name, jobs, time.Since(start).Seconds())
	if _, err := c.Expect(ctx, "first", benchkit.Phase(jobs)); err != nil { // c holds it until "go", unless spread
		return row{}, err
	}
	// With -profile, a CPU profile of the shaper over the measured window.
	profile := func() error { return nil }
	if cfg.profile != "" {
		profile = func() error {
			file := filepath.Join(cfg.profile, name+".cpu.pprof")
			return s.Profile(ctx, fmt.Sprintf("profile?seconds=%d", max(1, int(cfg.pacedDuration.Seconds()))), file)
		}
	}
	phases := "slots together"
	if spread {
		phases = "slots spread"
	}
	what := b.shaperWhat(fmt.Sprintf("paced, %d keys × %d/s, %s", cfg.pacedKeys, cfg.pacedRate, phases))
	server := []*benchkit.Proc{s.P}
	if ns != nil {
		what = b.shaperWhat(fmt.Sprintf("paced, %d keys × %d/s, %s, on the floor's nats-server", cfg.pacedKeys, cfg.pacedRate, phases))
		server = append(server, ns)
	}
	r, err := b.paced(ctx, what, c, server, release, profile)
	if err != nil && r.n == 0 {
		err = fmt.Errorf("%w; its log:\n%s", err, s.P.Tail())
	}
	return r, err
}

// paced measures a paced hand-off to consumer c: once the processes
// settled, it calls start (which lets the hand-off begin; nil: it runs
// already, and nothing settles), and after
// pacedWarmup counts the deliveries c took and the CPU time of server (the
// server side) and c over pacedDuration. during runs meanwhile, from the
// window's start; its error fails the row.
func (b *bench) paced(ctx context.Context, what string, c *benchkit.Proc, server []*benchkit.Proc, start, during func() error) (row, error) {
	cfg := b.cfg
	all := append(server[:len(server):len(server)], c)
	if start != nil {
		if err := settle(ctx, all, 10*time.Second); err != nil {
			return row{}, err
		}
		if err := start(); err != nil {
			return row{}, err
		}
	}
	mark := func() (int, int, []int64, time.Time, error) {
		ticks, err := sample(all)
		if err != nil {
			return 0, 0, nil, time.Time{}, err
		}
		at := time.Now()
		if err := c.Send("mark"); err != nil {
			return 0, 0, nil, at, err
		}
		rest, err := c.Expect(ctx, "mark", time.Minute)
		if err != nil {
			return 0, 0, nil, at, err
		}
		var n, d int
		_, err = fmt.Sscan(rest, &n, &d)
		return n, d, ticks, at, err
	}
	if err := sleep(ctx, cfg.pacedWarmup); err != nil {
		return row{}, err
	}
	n0, d0, c0, t0, err := mark()
	if err != nil {
		return row{}, err
	}
	done := make(chan error, 1)
	go func() { done <- during() }()
	if err := sleep(ctx, cfg.pacedDuration); err != nil {
		return row{}, err
	}
	n1, d1, c1, t1, err := mark()
	if err != nil {
		return row{}, err
	}
	if err := <-done; err != nil {
		return row{}, fmt.Errorf("%s: %w", what, err)
	}
	r := row{what: what, n: n1 - n0, dups: d1 - d0, secs: t1.Sub(t0).Seconds(), paced: true,
		want: float64(cfg.pacedKeys * cfg.pacedRate)}
	if r.n <= 0 {
		return r, fmt.Errorf("%s: no deliveries in %v", what, cfg.pacedDuration)
	}
	for i, p := range server {
		r.server = append(r.server, usage{p.Name, float64(c1[i]-c0[i]) / benchkit.ClockTicks})
	}
	r.consumer = float64(c1[len(server)]-c0[len(server)]) / benchkit.ClockTicks
	return r, nil
}
