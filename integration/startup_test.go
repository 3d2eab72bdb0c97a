package integration

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

var startRuns = flag.Int("starts", 10, "runs of TestShapersStartTogether")

// startPolicies makes every shaper create or bind fourteen R3 stores at
// start: the job records, the leases and the overrides, and per policy its
// queue, deferred jobs and dead letters, and one delivery stream.
const startPolicies = `policies:
  - name: a
    outflow: 10/s
    queue: 10
  - name: b
    outflow: 10/s
    queue: 10
    overflow: defer
  - name: c
    outflow: 10/s
    queue: 10
    deliver:
      stream: START_C_OUT
`

// TestShapersStartTogether starts three shapers at the same instant on a
// 3-node JetStream cluster holding no stream and no bucket, as `docker
// compose up` does, and checks that all three become ready: they race to
// create the same R3 stores, which can hang until a request's deadline,
// and must retry rather than exit. Each run after the first deletes every
// stream first, so that each starts on an empty cluster (-starts runs,
// 10 by default).
func TestShapersStartTogether(t *testing.T) {
	needBinaries(t)
	cluster := startCluster(t, 3)
	_, js := cluster.connect(t)
	policyFile := writePolicies(t, startPolicies)
	var slowest []time.Duration
	for run := range *startRuns {
		if run > 0 {
			wipe(t, js)
		}
		ok := t.Run(fmt.Sprint("run", run+1), func(t *testing.T) {
			ports := freePorts(t, 3)
			procs := make([]*proc, 3)
			addrs := make([]string, 3)
			start := time.Now()
			for i := range procs {
				addrs[i] = fmt.Sprintf("127.0.0.1:%d", ports[i])
				procs[i] = launchShaper(t, shaperConfig{policies: policyFile, httpAddr: addrs[i], natsURL: cluster.urls(), replicas: 3})
			}
			took := make([]time.Duration, 3)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for i := range procs {
				wg.Go(func() {
					errs[i] = ready(procs[i], addrs[i], 90*time.Second)
					took[i] = time.Since(start)
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			t.Logf("three shapers started together: ready after %v", took)
			for _, p := range procs {
				if retries := grepLines(p.out.String(), "start-up: failed, retrying"); len(retries) > 0 {
					t.Logf("%s retried %d times: %s", p.name, len(retries), strings.Join(retries, "\n\t"))
				}
			}
			slowest = append(slowest, max(took[0], took[1], took[2]))
			if t.Failed() {
				return
			}
			// Every policy is drained by exactly one of them.
			for _, policy := range []string{"a", "b", "c"} {
				waitFor(t, 20*time.Second, "one shaper to drain "+policy, func() bool {
					n := 0
					for _, addr := range addrs {
						if ps, err := policyStates(addr); err == nil && ps[policy].Draining {
							n++
						}
					}
					return n == 1
				})
			}
		})
		if !ok {
			t.Fatalf("run %d of %d failed", run+1, *startRuns)
		}
	}
	t.Logf("%d runs in a row, three shapers each, all ready; slowest shaper of each run: %v", *startRuns, slowest)
	keepsReplicas(t, js, cluster.urls(), policyFile)
}

// keepsReplicas checks, on a cluster whose shaper stores keep 3 replicas,
// that a shaper started without --replicas keeps 3 (start-up updates the
// stores in place: it once lowered every one to 1), and that one started
// with --replicas 1 is refused at start, naming the flag, and changes
// nothing; nor does one asking more replicas than the cluster has nodes.
func keepsReplicas(t *testing.T, js jetstream.JetStream, natsURL, policyFile string) {
	stores := []string{"SHAPER_JOBS", "SHAPER_Q_a", "KV_SHAPER_LEASES"}
	check := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range stores {
			st, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("%s: stream %s: %v", when, name, err)
			}
			if n := st.CachedInfo().Config.Replicas; n != 3 {
				t.Errorf("%s: stream %s keeps %d replicas, want 3", when, name, n)
			}
		}
	}
	check("after the start-up runs")
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	p := startShaper(t, shaperConfig{policies: policyFile, httpAddr: addr, natsURL: natsURL})
	check("with a shaper started without --replicas")
	if !strings.Contains(p.out.String(), "replicas: as many as the store keeps") {
		t.Errorf("a shaper started without --replicas on an R3 store did not log the replicas it keeps")
	}
	p.kill()
	p = launchShaper(t, shaperConfig{policies: policyFile, httpAddr: addr, natsURL: natsURL, replicas: 1})
	code, exited := p.wait(60 * time.Second)
	p.kill()
	out := p.out.String()
	const want = "shaper: replicas: 1: the shaper's streams on this cluster keep 3 replicas (SHAPER_JOBS), and a shaper does not lower them"
	if !exited || code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "(see --replicas)") {
		t.Errorf("a shaper started with --replicas 1 on an R3 store: exited %v with %d, output %q; want exit 1 saying %q … (see --replicas)", exited, code, out, want)
	}
	check("after a shaper started with --replicas 1")
	p = launchShaper(t, shaperConfig{policies: policyFile, httpAddr: addr, natsURL: natsURL, replicas: 5})
	code, exited = p.wait(60 * time.Second)
	p.kill()
	out = p.out.String()
	const want5 = "shaper: replicas: 5: the NATS cluster cannot place a stream of 5 replicas: it has fewer JetStream servers up"
	if !exited || code != 1 || !strings.Contains(out, want5) || !strings.Contains(out, "(see --replicas)") {
		t.Errorf("a shaper started with --replicas 5 on a 3-node cluster: exited %v with %d, output %q; want exit 1 saying %q … (see --replicas)", exited, code, out, want5)
	}
	check("after a shaper started with --replicas 5")
}

// grepLines returns the lines of out that contain sub.
func grepLines(out, sub string) []string {
	var lines []string
	for l := range strings.Lines(out) {
		if strings.Contains(l, sub) {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

// wipe deletes every stream of the cluster (buckets are streams too), so
// that the next shapers start on a cluster as empty as a fresh one.
func wipe(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		names := js.StreamNames(ctx)
		var all []string
		for n := range names.Name() {
			all = append(all, n)
		}
		if err := names.Err(); err != nil {
			t.Fatalf("list streams: %v", err)
		}
		if len(all) == 0 {
			return
		}
		for _, n := range all {
			if err := js.DeleteStream(ctx, n); err != nil && ctx.Err() != nil {
				t.Fatalf("delete stream %s: %v", n, err)
			}
		}
	}
}
