package integration

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/client"
)

// deferPolicy drains each key at 5 jobs a second from a queue of 3 and
// defers what overflows; deliveries are confirmed by the recorder.
const deferPolicy = `policies:
  - name: dfr
    outflow: 5/s
    queue: 3
    overflow: defer
    deliver:
      confirm: true
      timeout: 2s
    retry:
      backoff: 100ms
      max_backoff: 1s
`

// TestDeferredSurvivesKill9 submits a burst to an embedded-JetStream shaper
// whose policy defers overflow, so that most jobs are answered 429 with
// "deferred": true, kills the shaper with SIGKILL while jobs are still
// deferred, restarts it on the same data directory and ports, and checks
// that every job answered 202 or deferred is delivered (docs/architecture.md: a
// deferred job is never lost), with about one duplicate per key at most, and
// that GET /v1/jobs/{id} follows a deferred job from "deferred" to
// "delivered".
func TestDeferredSurvivesKill9(t *testing.T) {
	needBinaries(t)
	const keys, perKey = 4, 25
	cfg := embeddedShaper(t, deferPolicy)
	sh := startShaper(t, cfg)
	rec := record(t, cfg.clientURL(), "shaper.out.dfr.>")
	sub := newSubmitter(cfg.httpAddr, 10*time.Second)

	// One goroutine per key, so that each key's jobs have an order.
	var (
		mu                 sync.Mutex
		ids                []string
		accepted, deferred int
		lastDeferred       = map[string]string{} // key → its last deferred job
		wg                 sync.WaitGroup
	)
	start := time.Now()
	for k := range keys {
		wg.Go(func() {
			key := fmt.Sprintf("d%d", k)
			for j := range perKey {
				a := sub.submit(context.Background(), "dfr", key, fmt.Sprintf("job %d of %s", j, key))
				mu.Lock()
				switch {
				case a.code == http.StatusAccepted:
					accepted++
					ids = append(ids, a.id)
				case a.code == http.StatusTooManyRequests && a.deferred && a.id != "":
					deferred++
					ids = append(ids, a.id)
					lastDeferred[key] = a.id
				default:
					t.Errorf("POST /v1/jobs/dfr/%s (job %d) = %d deferred=%v id=%q (%v), want 202, or 429 deferred with an id",
						key, j, a.code, a.deferred, a.id, a.err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("burst of %d jobs over %d keys in %v: %d answered 202, %d answered 429 deferred",
		keys*perKey, keys, time.Since(start).Round(time.Millisecond), accepted, deferred)
	if deferred < keys*perKey/2 {
		t.Fatalf("only %d of %d jobs were deferred, want most: the burst did not overflow the queues (queue 3, 5/s)", deferred, keys*perKey)
	}

	// The last deferred job of a key waits about 5 s for its turn: its
	// record (written asynchronously) must say "deferred" meanwhile.
	probe := lastDeferred["d0"]
	var st client.Job
	waitFor(t, 5*time.Second, "a job record for deferred job "+probe, func() bool {
		var err error
		st, err = jobState(cfg.httpAddr, probe)
		return err == nil
	})
	if st.Status != client.JobDeferred {
		t.Errorf("GET /v1/jobs/%s of a job answered 429 deferred = status %v, want deferred", probe, st.Status)
	}

	// Kill once the jobs answered 202 and a few re-admitted ones have been
	// delivered, while most still wait deferred.
	waitFor(t, 30*time.Second, "20 jobs to be delivered", func() bool { return rec.delivered() >= 20 })
	ps, err := policyStates(cfg.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(sh.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	sh.wait(10 * time.Second)
	before := rec.delivered()
	t.Logf("kill -9 after %d of %d jobs delivered; just before, the shaper reported %d deferred jobs waiting and %d re-admitted",
		before, len(ids), ps["dfr"].DeferredQueued, ps["dfr"].Readmitted)
	if before >= len(ids)-keys*perKey/4 {
		t.Fatalf("%d of %d jobs were delivered before the kill: the test did not crash a shaper holding deferred jobs", before, len(ids))
	}

	startShaper(t, cfg)
	t.Logf("restarted and ready %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	rep := rec.waitAll(ids, 60*time.Second)
	t.Logf("after restart: %d deliveries of %d jobs (%d answered 202, %d deferred); %d duplicate deliveries over %d jobs (%d keys); %d redeliveries marked Shaper-Attempt>1; %d unknown ids; all delivered %v after the kill",
		rep.total, len(ids), accepted, deferred, rep.duplicates, rep.dupJobs, keys, rep.retries, rep.unknown,
		time.Since(killedAt).Round(time.Millisecond))
	if len(rep.missing) > 0 {
		ps, _ := policyStates(cfg.httpAddr)
		t.Fatalf("%d of %d jobs answered 202 or 429 deferred were never delivered (lost across kill -9), e.g. %v; the shaper reports %+v",
			len(rep.missing), len(ids), firstFew(rep.missing, 5), ps["dfr"])
	}
	if rep.duplicates > 2*keys {
		t.Errorf("%d duplicate deliveries after one crash, want at most %d (about one per key per crash)", rep.duplicates, 2*keys)
	}
	if rep.unknown > 0 {
		t.Errorf("%d delivered job ids were never answered by the shaper", rep.unknown)
	}

	// The delivered record is written asynchronously after the delivery.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err = jobState(cfg.httpAddr, probe)
		if err == nil && st.Status == client.JobDelivered {
			t.Logf("GET /v1/jobs/%s at the end: %+v", probe, st)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("GET /v1/jobs/%s of a deferred job delivered after the restart = %+v (%v), want status \"delivered\"", probe, st, err)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A re-admitted job keeps its place in the deferred stream until its
	// outflow slot ends (at most 1 s): the count reaches 0 shortly after.
	var p client.Policy
	deadline = time.Now().Add(5 * time.Second)
	for {
		ps, err := policyStates(cfg.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		if p = ps["dfr"]; p.Dead == 0 && p.DeferredQueued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("5s after every job was delivered the shaper reports %d dead letters and %d deferred jobs waiting, want 0 and 0", p.Dead, p.DeferredQueued)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}
