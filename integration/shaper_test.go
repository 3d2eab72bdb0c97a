package integration

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/client"
)

// shaperConfig is how a test runs one shaper process. Ports survive
// restarts: start a new process with the same config to restart.
type shaperConfig struct {
	policies   string // policy file
	httpAddr   string // 127.0.0.1:N
	data       string // embedded JetStream store (embedded mode)
	natsListen string // embedded JetStream client address (embedded mode)
	natsURL    string // external cluster URLs, comma-separated (external mode)
	replicas   int    // external mode; 0: no --replicas, as many as the store keeps
	redisURL   string // admission limiter state (external mode), redis://ADDR
	shutdown   time.Duration
	leaseTTL   time.Duration // --lease-ttl; default the shaper's
	bin        string        // the shaper binary; default the one TestMain built
	extra      []string      // more flags of serve
}

// embeddedShaper returns the config of a shaper with embedded JetStream on
// free ports, storing in a temporary directory, serving policyYAML.
func embeddedShaper(t *testing.T, policyYAML string) shaperConfig {
	t.Helper()
	ports := freePorts(t, 2)
	return shaperConfig{
		policies:   writePolicies(t, policyYAML),
		httpAddr:   "127.0.0.1:" + strconv.Itoa(ports[0]),
		data:       t.TempDir(),
		natsListen: "127.0.0.1:" + strconv.Itoa(ports[1]),
	}
}

func writePolicies(t *testing.T, policyYAML string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, []byte(policyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// natsURL is where outside clients reach the shaper's JetStream.
func (c shaperConfig) clientURL() string {
	if c.natsURL != "" {
		return c.natsURL
	}
	return "nats://" + c.natsListen
}

// startShaper runs `shaper serve` with c and waits until /readyz answers 200.
func startShaper(t *testing.T, c shaperConfig) *proc {
	t.Helper()
	p := launchShaper(t, c)
	waitReady(t, p, c.httpAddr, 30*time.Second)
	return p
}

// launchShaper runs `shaper serve` with c and returns at once.
func launchShaper(t *testing.T, c shaperConfig) *proc {
	t.Helper()
	args := []string{"serve", "--policies", c.policies, "--http", c.httpAddr, "--log-level", "debug"}
	if c.natsURL != "" {
		args = append(args, "--nats-url", c.natsURL)
		if c.replicas > 0 {
			args = append(args, "--replicas", strconv.Itoa(c.replicas))
		}
		if c.redisURL != "" {
			args = append(args, "--redis-url", c.redisURL)
		}
	} else {
		args = append(args, "--data", c.data, "--nats-listen", c.natsListen)
	}
	if c.leaseTTL > 0 {
		args = append(args, "--lease-ttl", c.leaseTTL.String())
	}
	if c.shutdown > 0 {
		args = append(args, "--shutdown-timeout", c.shutdown.String())
	}
	args = append(args, c.extra...)
	return startProc(t, "shaper "+c.httpAddr, cmp.Or(c.bin, bins.shaper), args...)
}

// waitReady polls GET /readyz until it answers 200, failing the test when p
// exits or d passes.
func waitReady(t *testing.T, p *proc, addr string, d time.Duration) {
	t.Helper()
	if err := ready(p, addr, d); err != nil {
		t.Fatal(err)
	}
}

// ready polls GET /readyz until it answers 200, and returns an error when p
// exits or d passes. It may be called from any goroutine.
func ready(p *proc, addr string, d time.Duration) error {
	c, err := client.New("http://"+addr, client.Config{HTTPClient: &http.Client{Timeout: time.Second}})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	last := "no answer"
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready: %s", p.name, p.state())
		}
		err := c.Ready(context.Background())
		if err == nil {
			return nil
		}
		last = err.Error()
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v: last /readyz: %s", p.name, d, last)
}

// submitter submits jobs over HTTP.
type submitter struct {
	client *http.Client // its idle connections can be closed
	api    *client.Client
}

func newSubmitter(addr string, timeout time.Duration) *submitter {
	hc := &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}
	api, err := client.New("http://"+addr, client.Config{HTTPClient: hc})
	if err != nil {
		panic(err) // addr is a test's own 127.0.0.1:port
	}
	return &submitter{client: hc, api: api}
}

// answer is the shaper's answer to one submission.
type answer struct {
	code     int    // 0 when the request failed
	id       string // of a job answered 202, or 429 and deferred
	deferred bool   // 429 with "deferred": true: the job is kept
	err      error  // set for every answer but 202
	latency  time.Duration
}

func (s *submitter) submit(ctx context.Context, policy, key, payload string) answer {
	start := time.Now()
	res, err := s.api.Submit(ctx, policy, key, []byte(payload))
	a := answer{latency: time.Since(start), err: err}
	var refused *client.Error
	switch {
	case res.Outcome == client.OutcomeAccepted: // err is set when its body did not decode
		a.code, a.id = http.StatusAccepted, res.ID
		if a.err == nil && res.ID == "" {
			a.err = errors.New("202 without a job id")
		}
	case errors.As(err, &refused):
		a.code = refused.StatusCode
	case err == nil: // a 429: rejected, limited or deferred
		a.code, a.id, a.deferred = http.StatusTooManyRequests, res.ID, res.Outcome == client.OutcomeDeferred
		a.err = fmt.Errorf("429 %v: %s", res.Outcome, res.Detail)
	}
	return a
}
