package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
)

// Running is a Shaper serving in the background of a test.
type Running struct {
	*shaper.Shaper
	stop func()
}

// Stop shuts the Shaper down gracefully and waits for Run to return. It is
// idempotent; the test's cleanup calls it too.
func (r *Running) Stop() { r.stop() }

// Policies parses a policy file given as text, failing t on an error.
func Policies(t testing.TB, yaml string) *policies.Set {
	t.Helper()
	set, err := policies.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("testenv: policies: %v", err)
	}
	return set
}

// Shaper runs a Shaper with cfg until the test ends, and returns it once it
// accepts jobs. Zero HTTPAddr, NATSListen and DataDir (with no NATSURL) mean
// a random HTTP port, an embedded JetStream on a random port and a temporary
// store.
func Shaper(t testing.TB, cfg shaper.Config) *Running {
	t.Helper()
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	if cfg.NATSURL == "" && cfg.NATSListen == "" {
		cfg.NATSListen = "127.0.0.1:-1"
	}
	if cfg.NATSURL == "" && cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	s, err := shaper.New(cfg)
	if err != nil {
		t.Fatalf("testenv: shaper: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("testenv: shaper Run = %v before ready", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("testenv: shaper not ready after 20s")
	}
	var stopped bool
	var runErr error
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case runErr = <-done:
		case <-time.After(20 * time.Second):
			t.Error("testenv: shaper Run did not return 20s after cancel")
		}
		if runErr != nil {
			t.Errorf("testenv: shaper Run = %v", runErr)
		}
	}
	t.Cleanup(stop)
	return &Running{Shaper: s, stop: stop}
}
