package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// bench is one run's shared state: its configuration, its temporary
// directory, its children and the binaries they run.
type bench struct {
	cfg    config
	dir    string
	g      *group
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

// phase bounds one wait on a child: long enough for a slow machine, short
// enough to fail well within -timeout.
func (b *bench) phase(jobs int) time.Duration {
	return time.Minute + time.Duration(jobs)*time.Millisecond
}

// startConsumer starts the consumer role answering on subject.
func (b *bench) startConsumer(ctx context.Context, name, url, subject string, expect int) (*proc, error) {
	c, err := b.g.start(name, true, b.self, roleConsumer, "-nats-url", url, "-subject", subject, "-expect", strconv.Itoa(expect))
	if err != nil {
		return nil, err
	}
	_, err = c.expect(ctx, "ready", time.Minute)
	return c, err
}

// unpaced starts the clock by sending "go" to release: the consumer c
// holding the first deliveries of a full pipeline (it waits for the first
// to arrive), or a floor worker that has not fetched yet. It waits until c
// has taken every job, and returns the row with the CPU time of server
// (the server side) and of the consumer meanwhile.
func (b *bench) unpaced(ctx context.Context, what string, c, release *proc, server []*proc, jobs int) (row, error) {
	if release == c {
		if _, err := c.expect(ctx, "first", b.phase(jobs)); err != nil {
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
	if err := release.send("go"); err != nil {
		return row{}, err
	}
	rest, err := c.expect(ctx, "done", b.phase(jobs))
	if err != nil {
		return row{}, err
	}
	secs := time.Since(t0).Seconds()
	c1, err := sample(all)
	if err != nil {
		return row{}, err
	}
	r := row{what: what, secs: secs}
	if _, err := fmt.Sscan(rest, &r.n, &r.dups); err != nil {
		return row{}, fmt.Errorf("consumer said done %q: %v", rest, err)
	}
	for i, p := range server {
		r.server = append(r.server, usage{p.name, float64(c1[i]-c0[i]) / clockTicks})
	}
	r.consumer = float64(c1[len(server)]-c0[len(server)]) / clockTicks
	return r, nil
}

// floor measures the NATS floor: n jobs preloaded into a work-queue stream
// of its own on the standalone nats-server, delivered by the worker role.
func (b *bench) floor(ctx context.Context, ns *proc, url string, js jetstream.JetStream, name string, await bool) (row, error) {
	cfg := b.cfg
	in, out := name+".q", name+".out"
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      strings.ToUpper(name),
		Subjects:  []string{in + ".>"},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
	})
	if err != nil {
		return row{}, fmt.Errorf("stream: %w", err)
	}
	payload := bytes.Repeat([]byte("x"), cfg.payload)
	for j := range cfg.jobs {
		if _, err := js.PublishAsync(fmt.Sprintf("%s.k%d", in, j%cfg.keys), payload, jetstream.WithStallWait(10*time.Second)); err != nil {
			return row{}, fmt.Errorf("preload: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(b.phase(cfg.jobs)):
		return row{}, fmt.Errorf("preload: %d publishes not acknowledged", js.PublishAsyncPending())
	case <-ctx.Done():
		return row{}, ctx.Err()
	}
	c, err := b.startConsumer(ctx, name+"-consumer", url, out+".>", cfg.jobs)
	if err != nil {
		return row{}, err
	}
	defer c.stop(5 * time.Second)
	if err := c.send("go"); err != nil { // the worker holds the pipeline instead
		return row{}, err
	}
	w, err := b.g.start(name+"-worker", true, b.self, roleWorker, "-nats-url", url, "-stream", strings.ToUpper(name),
		"-in", in, "-out", out, "-await-ack="+strconv.FormatBool(await),
		"-fetchers", strconv.Itoa(cfg.fetchers), "-batch", strconv.Itoa(cfg.batch))
	if err != nil {
		return row{}, err
	}
	defer w.stop(5 * time.Second)
	if _, err := w.expect(ctx, "ready", time.Minute); err != nil {
		return row{}, err
	}
	acks := "acks confirmed"
	if !await {
		acks = "acks not awaited"
	}
	what := fmt.Sprintf("floor: JetStream work-queue pull consumer, batches of %d, %d in flight, %s", cfg.batch, cfg.fetchers, acks)
	return b.unpaced(ctx, what, c, w, []*proc{ns, w}, cfg.jobs)
}

// startNATS starts the standalone nats-server with JetStream on a store in
// the run's directory and connects to it.
func (b *bench) startNATS(ctx context.Context) (*proc, *nats.Conn, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, nil, "", err
	}
	ns, err := b.g.start("nats-server", false, b.nats, "-a", "127.0.0.1", "-p", strconv.Itoa(port),
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
		case <-ns.done:
			return nil, nil, "", fmt.Errorf("nats-server exited; its log:\n%s", tail(ns.log))
		case <-ctx.Done():
			return nil, nil, "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, nil, "", fmt.Errorf("nats-server: %w", err)
		}
	}
}

// shaperRun is one shaper serve of its own, on free ports and a data
// directory of its own, with one policy.
type shaperRun struct {
	p        *proc
	httpAddr string
	natsURL  string
}

// startShaper writes the policy file of name and starts a shaper with it.
func (b *bench) startShaper(ctx context.Context, name, outflow string, queue int) (*shaperRun, error) {
	policy := fmt.Sprintf("policies:\n  - name: %s\n    outflow: %s\n    queue: %d\n    overflow: reject\n", name, outflow, queue)
	if b.cfg.partitions > 0 {
		policy += fmt.Sprintf("    partitions: %d\n", b.cfg.partitions)
	}
	policy += "    deliver:\n      timeout: 60s\n"
	file := filepath.Join(b.dir, name+".yaml")
	if err := os.WriteFile(file, []byte(policy), 0o644); err != nil {
		return nil, err
	}
	hp, err1 := freePort()
	np, err2 := freePort()
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("free ports: %v %v", err1, err2)
	}
	s := &shaperRun{httpAddr: fmt.Sprintf("127.0.0.1:%d", hp), natsURL: fmt.Sprintf("nats://127.0.0.1:%d", np)}
	args := []string{"serve", "--policies", file, "--http", s.httpAddr, "--data", filepath.Join(b.dir, "data-"+name),
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", np), "--log-level", "warn"}
	if b.cfg.workers > 0 {
		args = append(args, "--workers", strconv.Itoa(b.cfg.workers))
	}
	if s.p, err1 = b.g.start("shaper-"+name, false, b.shaper, args...); err1 != nil {
		return nil, err1
	}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + s.httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.p.done:
			return nil, fmt.Errorf("shaper exited; its log:\n%s", tail(s.p.log))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("shaper not ready within a minute; its log:\n%s", tail(s.p.log))
		}
	}
}

// stopWith stops the shaper, then its consumer c: the deliveries in
// flight are answered, so the shaper stops without waiting for them.
func (s *shaperRun) stopWith(c *proc) {
	c.send("go")
	s.p.stop(15 * time.Second)
	c.stop(5 * time.Second)
}

// submit admits jobs jobs of payload bytes to policy over keys keys (job j
// to key k<j mod keys>) through the shaper's HTTP API, 32 at a time, and
// fails unless every one is answered 202.
func (s *shaperRun) submit(ctx context.Context, policy string, jobs, keys, payload int) error {
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	defer cl.CloseIdleConnections()
	body := bytes.Repeat([]byte("x"), payload)
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for j := int(next.Add(1) - 1); j < jobs && ctx.Err() == nil && first.Load() == nil; j = int(next.Add(1) - 1) {
				url := fmt.Sprintf("http://%s/v1/jobs/%s/k%d", s.httpAddr, policy, j%keys)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/octet-stream")
				resp, err := cl.Do(req)
				if err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					first.CompareAndSwap(nil, fmt.Errorf("POST %s: %s: %s", url, resp.Status, b))
				}
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	return ctx.Err()
}

// shaperUnpaced measures the shaper delivering n preloaded jobs over k
// keys at an outflow that does not bind.
func (b *bench) shaperUnpaced(ctx context.Context) (row, error) {
	cfg := b.cfg
	perKey := (cfg.jobs + cfg.keys - 1) / cfg.keys
	s, err := b.startShaper(ctx, "unpaced", "1000/s", min(1_000_000, max(1000, 2*perKey)))
	if err != nil {
		return row{}, err
	}
	c, err := b.startConsumer(ctx, "unpaced-consumer", s.natsURL, "shaper.out.unpaced.>", cfg.jobs)
	if err != nil {
		s.p.stop(15 * time.Second)
		return row{}, err
	}
	defer s.stopWith(c)
	start := time.Now()
	if err := s.submit(ctx, "unpaced", cfg.jobs, cfg.keys, cfg.payload); err != nil {
		return row{}, fmt.Errorf("preload: %w", err)
	}
	b.logf("shaper, unpaced: %d jobs admitted in %.1f s", cfg.jobs, time.Since(start).Seconds())
	return b.unpaced(ctx, b.shaperWhat("unpaced, confirmed delivery"), c, c, []*proc{s.p}, cfg.jobs)
}

// shaperWhat names a shaper row with its settings.
func (b *bench) shaperWhat(what string) string {
	w := "default workers"
	if b.cfg.workers > 0 {
		w = fmt.Sprintf("%d workers", b.cfg.workers)
	}
	if b.cfg.partitions > 0 {
		w += fmt.Sprintf(", %d partitions", b.cfg.partitions)
	}
	return fmt.Sprintf("shaper, %s (%s)", what, w)
}

// shaperPaced measures the shaper delivering pacedKeys keys at pacedRate
// a second each from a queue that never runs dry: the CPU per delivery and
// the rate reached over pacedDuration, after pacedWarmup.
func (b *bench) shaperPaced(ctx context.Context) (row, error) {
	cfg := b.cfg
	perKey := int(float64(cfg.pacedRate)*(cfg.pacedWarmup+cfg.pacedDuration).Seconds()) + 3*cfg.pacedRate
	jobs := perKey * cfg.pacedKeys
	s, err := b.startShaper(ctx, "paced", fmt.Sprintf("%d/s", cfg.pacedRate), min(1_000_000, 2*perKey))
	if err != nil {
		return row{}, err
	}
	c, err := b.startConsumer(ctx, "paced-consumer", s.natsURL, "shaper.out.paced.>", 0)
	if err != nil {
		s.p.stop(15 * time.Second)
		return row{}, err
	}
	defer s.stopWith(c)
	start := time.Now()
	if err := s.submit(ctx, "paced", jobs, cfg.pacedKeys, cfg.payload); err != nil {
		return row{}, fmt.Errorf("preload: %w", err)
	}
	b.logf("shaper, paced: %d jobs admitted in %.1f s", jobs, time.Since(start).Seconds())
	if _, err := c.expect(ctx, "first", b.phase(jobs)); err != nil {
		return row{}, err
	}
	all := []*proc{s.p, c}
	if err := settle(ctx, all, 10*time.Second); err != nil {
		return row{}, err
	}
	if err := c.send("go"); err != nil {
		return row{}, err
	}
	mark := func() (int, int, []int64, time.Time, error) {
		ticks, err := sample(all)
		if err != nil {
			return 0, 0, nil, time.Time{}, err
		}
		at := time.Now()
		if err := c.send("mark"); err != nil {
			return 0, 0, nil, at, err
		}
		rest, err := c.expect(ctx, "mark", time.Minute)
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
	if err := sleep(ctx, cfg.pacedDuration); err != nil {
		return row{}, err
	}
	n1, d1, c1, t1, err := mark()
	if err != nil {
		return row{}, err
	}
	what := b.shaperWhat(fmt.Sprintf("paced, %d keys × %d/s", cfg.pacedKeys, cfg.pacedRate))
	r := row{what: what, n: n1 - n0, dups: d1 - d0, secs: t1.Sub(t0).Seconds(), paced: true,
		want: float64(cfg.pacedKeys * cfg.pacedRate)}
	if r.n <= 0 {
		return row{}, fmt.Errorf("shaper, paced: no deliveries in %v; its log:\n%s", cfg.pacedDuration, tail(s.p.log))
	}
	r.server = []usage{{s.p.name, float64(c1[0]-c0[0]) / clockTicks}}
	r.consumer = float64(c1[1]-c0[1]) / clockTicks
	return r, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
