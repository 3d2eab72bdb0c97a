package benchkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Policy returns a policies file of one policy: name at outflow, queue
// jobs a key, overflow reject, partitions when above 0, a delivery timeout
// of 60 s.
func Policy(name, outflow string, queue, partitions int) string {
	doc := fmt.Sprintf("policies:\n  - name: %s\n    outflow: %s\n    queue: %d\n    overflow: reject\n", name, outflow, queue)
	if partitions > 0 {
		doc += fmt.Sprintf("    partitions: %d\n", partitions)
	}
	return doc + "    deliver:\n      timeout: 60s\n"
}

// ShaperConfig is what StartShaper starts.
type ShaperConfig struct {
	Name       string // the child's
	Bin        string
	PolicyFile string // written with Policy
	Policy     string
	Data       string // the data directory
	LogLevel   string
	Args       []string // more flags of shaper serve
	// NATSURL, when set, is an external NATS server the shaper uses
	// instead of its embedded one (--nats-url).
	NATSURL string
}

// Shaper is one shaper serve of a run's, with embedded JetStream (or
// ShaperConfig.NATSURL's), on free ports.
type Shaper struct {
	P        *Proc
	HTTPAddr string // host:port
	NATSURL  string
}

// StartShaper writes the policy file and starts shaper serve with it in
// g. It does not wait for the shaper (AwaitReady).
func (g *Group) StartShaper(c ShaperConfig) (*Shaper, error) {
	if err := os.WriteFile(c.PolicyFile, []byte(c.Policy), 0o644); err != nil {
		return nil, err
	}
	hp, err1 := FreePort()
	np, err2 := FreePort()
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("free ports: %v %v", err1, err2)
	}
	s := &Shaper{HTTPAddr: fmt.Sprintf("127.0.0.1:%d", hp), NATSURL: fmt.Sprintf("nats://127.0.0.1:%d", np)}
	nats := []string{"--nats-listen", fmt.Sprintf("127.0.0.1:%d", np)}
	if c.NATSURL != "" {
		s.NATSURL = c.NATSURL
		nats = []string{"--nats-url", c.NATSURL}
	}
	args := append([]string{"serve", "--policies", c.PolicyFile, "--http", s.HTTPAddr, "--data", c.Data,
		"--log-level", c.LogLevel}, nats...)
	args = append(args, c.Args...)
	var err error
	if s.P, err = g.Start(c.Name, c.Bin, args...); err != nil {
		return nil, err
	}
	return s, nil
}

// AwaitReady polls the shaper's /readyz every poll until it answers 200,
// and returns when it first did. It fails if the shaper exits or is not
// ready within.
func (s *Shaper) AwaitReady(ctx context.Context, poll, within time.Duration) (time.Time, error) {
	cl := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := cl.Get("http://" + s.HTTPAddr + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		select {
		case <-s.P.Done():
			return time.Time{}, fmt.Errorf("%s exited; its log:\n%s", s.P.Name, s.P.Tail())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s not ready within %v; its log:\n%s", s.P.Name, within, s.P.Tail())
		}
	}
}

// Submit admits jobs jobs of payload bytes to policy over keys keys (job j
// to key k<j mod keys>) through the HTTP API of s, conns at a time, and
// fails unless every one is answered 202.
func (s *Shaper) Submit(ctx context.Context, policy string, jobs, keys, payload, conns int) error {
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}, Timeout: 30 * time.Second}
	defer cl.CloseIdleConnections()
	body := bytes.Repeat([]byte("x"), payload)
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for j := int(next.Add(1) - 1); j < jobs && ctx.Err() == nil && first.Load() == nil; j = int(next.Add(1) - 1) {
				if err := s.post(ctx, cl, policy, j%keys, body); err != nil {
					first.CompareAndSwap(nil, err)
					return
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

// Seed admits perKey jobs of payload bytes to each of keys keys of policy
// through the HTTP API of s, key k<i>'s at i/keys of over from now, conns
// at a time, and fails unless every one is answered 202. A key's first job
// is delivered as it comes and its later ones a period apart, so the keys'
// slots end up spread evenly over over (a period: every phase taken once).
func (s *Shaper) Seed(ctx context.Context, policy string, keys, perKey, payload int, over time.Duration, conns int) error {
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}, Timeout: 30 * time.Second}
	defer cl.CloseIdleConnections()
	body := bytes.Repeat([]byte("x"), payload)
	start := time.Now()
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for c := range conns {
		wg.Go(func() {
			for k := c; k < keys && errs[c] == nil; k += conns {
				select {
				case <-ctx.Done():
					errs[c] = ctx.Err()
					return
				case <-time.After(time.Until(start.Add(time.Duration(k) * over / time.Duration(keys)))):
				}
				for range perKey {
					if errs[c] = s.post(ctx, cl, policy, k, body); errs[c] != nil {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// post admits one job with body to key k<key> of policy, failing unless it
// is answered 202.
func (s *Shaper) post(ctx context.Context, cl *http.Client, policy string, key int, body []byte) error {
	url := fmt.Sprintf("http://%s/v1/jobs/%s/k%d", s.HTTPAddr, policy, key)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, b)
	}
	return nil
}

// Pprof returns the body of the shaper's /debug/pprof/<what> (served to
// loopback without a token), failing unless it is answered 200.
func (s *Shaper) Pprof(ctx context.Context, what string) ([]byte, error) {
	url := fmt.Sprintf("http://%s/debug/pprof/%s", s.HTTPAddr, what)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return body, err
}

// Profile writes the shaper's /debug/pprof/<what> to file: "profile?seconds=N"
// for a CPU profile, "heap".
func (s *Shaper) Profile(ctx context.Context, what, file string) error {
	body, err := s.Pprof(ctx, what)
	if err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}
