package integration

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// confirmedPolicy is a policy file with one policy delivering the default
// way, confirmed requests: a delivery counts only when the recorder has
// replied, so a job published while the recorder is reconnecting is
// delivered again, not lost. Retries of a failed delivery start after 100 ms.
func confirmedPolicy(name, outflow string, queue int) string {
	return fmt.Sprintf(`policies:
  - name: %s
    outflow: %s
    queue: %d
    deliver:
      timeout: 2s
    retry:
      backoff: 100ms
      max_backoff: 1s
`, name, outflow, queue)
}

// submitAll submits perKey jobs to each of keys keys of policy (keys
// "k00", "k01", …), every key from one goroutine so that its jobs have an
// order, and fails the test on any answer but 202. It returns every id and
// the ids of each key in submission order.
func submitAll(t *testing.T, s *submitter, policy string, keys, perKey int) ([]string, map[string][]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const workers = 5
	var (
		mu    sync.Mutex
		all   []string
		byKey = map[string][]string{}
		wg    sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for j := range perKey {
				for k := w; k < keys; k += workers {
					key := fmt.Sprintf("k%02d", k)
					a := s.submit(ctx, policy, key, fmt.Sprintf("job %d of %s", j, key))
					if a.code != 202 {
						t.Errorf("POST /v1/jobs/%s/%s = %d (%v), want 202", policy, key, a.code, a.err)
						return
					}
					mu.Lock()
					all = append(all, a.id)
					byKey[key] = append(byKey[key], a.id)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return all, byKey
}

// waitFor polls cond every 20 ms until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKill9Restart kills an embedded-JetStream shaper with SIGKILL while it
// drains, restarts it on the same data directory and ports, and checks that
// every job answered 202 is delivered (docs/architecture.md: at least once, also across
// kill -9), with at most a couple of duplicates per key.
func TestKill9Restart(t *testing.T) {
	needBinaries(t)
	const keys, perKey = 20, 30
	cfg := embeddedShaper(t, confirmedPolicy("k9", "8/s", 1000))
	sh := startShaper(t, cfg)
	rec := record(t, cfg.clientURL(), "shaper.out.k9.>")
	sub := newSubmitter(cfg.httpAddr, 10*time.Second)

	submitStart := time.Now()
	ids, _ := submitAll(t, sub, "k9", keys, perKey)
	t.Logf("%d jobs answered 202 in %v", len(ids), time.Since(submitStart).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "a quarter of the jobs to be delivered", func() bool { return rec.delivered() >= len(ids)/4 })
	if err := syscall.Kill(sh.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	sh.wait(10 * time.Second)
	before := rec.delivered()
	if before >= len(ids) {
		t.Fatalf("all %d jobs were delivered before the kill: the test did not crash a draining shaper (drain faster than submission?)", len(ids))
	}
	t.Logf("kill -9 after %d of %d jobs delivered", before, len(ids))

	startShaper(t, cfg)
	t.Logf("restarted and ready %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	rep := rec.waitAll(ids, 60*time.Second)
	t.Logf("after restart: %d deliveries of %d jobs; %d duplicate deliveries over %d jobs (%d keys); %d redeliveries marked Shaper-Attempt>1; %d unknown ids; all delivered %v after the kill",
		rep.total, len(ids), rep.duplicates, rep.dupJobs, keys, rep.retries, rep.unknown, time.Since(killedAt).Round(time.Millisecond))
	if len(rep.missing) > 0 {
		t.Fatalf("%d of %d jobs answered 202 were never delivered (lost across kill -9), e.g. %v",
			len(rep.missing), len(ids), firstFew(rep.missing, 5))
	}
	if rep.duplicates > 2*keys {
		t.Errorf("%d duplicate deliveries after one crash, want at most %d (about one per key per crash)", rep.duplicates, 2*keys)
	}
}

// TestGracefulShutdown stops a draining shaper with SIGTERM: it must exit 0
// within its shutdown timeout, start no new deliveries once told to stop,
// and free the slots of the jobs it delivered, so that after a restart every
// job is delivered exactly once and in order per key.
func TestGracefulShutdown(t *testing.T) {
	needBinaries(t)
	testGracefulShutdown(t, false)
}

// TestGracefulShutdownIdleConn is TestGracefulShutdown with one HTTP client
// connected that has not sent its request yet (a pre-connecting load
// balancer or client; Go's own http.Transport leaves such connections
// behind after dial races). The shaper must still stop its drain at once:
// http.Server.Shutdown counts a connection without a request as active for
// 5 s, so the drain may not wait for it.
func TestGracefulShutdownIdleConn(t *testing.T) {
	needBinaries(t)
	testGracefulShutdown(t, true)
}

func testGracefulShutdown(t *testing.T, idleConn bool) {
	const keys, perKey = 20, 30
	cfg := embeddedShaper(t, confirmedPolicy("grace", "8/s", 1000))
	cfg.shutdown = 5 * time.Second
	if idleConn {
		cfg.shutdown = 2 * time.Second // ends while the drain still has work
	}
	sh := startShaper(t, cfg)
	rec := record(t, cfg.clientURL(), "shaper.out.grace.>")
	sub := newSubmitter(cfg.httpAddr, 10*time.Second)

	ids, byKey := submitAll(t, sub, "grace", keys, perKey)
	waitFor(t, 30*time.Second, "a quarter of the jobs to be delivered", func() bool { return rec.delivered() >= len(ids)/4 })
	// Close the submitter's unused connections: a dial race can leave one
	// that never carried a request (see TestGracefulShutdownIdleConn).
	sub.client.CloseIdleConnections()
	if idleConn {
		c, err := net.Dial("tcp", cfg.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if err := syscall.Kill(sh.pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termAt := time.Now()
	atTerm := rec.delivered()
	code, exited := sh.wait(cfg.shutdown + 5*time.Second)
	took := time.Since(termAt).Round(time.Millisecond)
	if !exited {
		t.Fatalf("shaper still running %v after SIGTERM (shutdown timeout %v)", took, cfg.shutdown)
	}
	atExit := rec.delivered()
	t.Logf("SIGTERM after %d of %d jobs delivered: exit code %d after %v; %d jobs delivered during the shutdown",
		atTerm, len(ids), code, took, atExit-atTerm)
	if atTerm >= len(ids) {
		t.Fatalf("all %d jobs were delivered before SIGTERM: the test did not stop a draining shaper", len(ids))
	}
	if code != 0 {
		t.Errorf("shaper exit code after SIGTERM = %d, want 0", code)
	}
	if took > cfg.shutdown+time.Second {
		t.Errorf("shaper took %v to stop, want at most its shutdown timeout %v (+1s)", took, cfg.shutdown)
	}
	if n := atExit - atTerm; n > keys {
		t.Errorf("%d jobs delivered between SIGTERM and exit, want at most %d (one in flight per key): the drain went on starting deliveries during the shutdown", n, keys)
	}

	startShaper(t, cfg)
	rep := rec.waitAll(ids, 60*time.Second)
	t.Logf("after restart: %d deliveries of %d jobs; %d duplicate deliveries over %d jobs; %d unknown ids",
		rep.total, len(ids), rep.duplicates, rep.dupJobs, rep.unknown)
	if len(rep.missing) > 0 {
		t.Fatalf("%d of %d jobs answered 202 were never delivered after a graceful restart, e.g. %v",
			len(rep.missing), len(ids), firstFew(rep.missing, 5))
	}
	if rep.duplicates != 0 {
		t.Errorf("%d duplicate deliveries (%d jobs) across a graceful shutdown, want 0: a graceful shutdown must free the slots of delivered jobs before exit",
			rep.duplicates, rep.dupJobs)
	}
	for key, want := range byKey {
		if got := rec.order(key); !slices.Equal(got, want) {
			t.Errorf("key %s: jobs delivered in another order than submitted across a graceful restart:\n got %v\nwant %v", key, got, want)
		}
	}
}
