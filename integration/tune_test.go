package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/replay"
)

// tuneDuration is the length of TestTuneFidelity's traces; longer runs are
// reported in BENCHMARKS.md.
var tuneDuration = flag.Duration("tune.duration", 40*time.Second, "length of TestTuneFidelity's traces")

// TestTuneFidelity checks that shaper tune predicts what a live shaper
// does. For each case, a made-up trace of 40 s (-tune.duration) is
// replayed by shaper tune and run live through a real shaper with embedded
// JetStream (producer send --trace), delivering to a real NATS consumer
// that answers every delivery, or fails it in the case's windows of trace
// time (tune --down; the producer starts the trace's clock at a time the
// consumer knows, --start-at). The replay's accepted, rejected, deferred
// and limited counts and its deliveries must be within 2 % of the live
// run's, and its p99 time in queue within 10 % of what the consumer
// measures (receive time minus Shaper-Enqueued-At, of the jobs it took);
// its failed attempts and dead letters within 2 % of the consumer's
// failures and the shaper's dead letters.
//
// The cases cover reject-only policies with a consumer that keeps up
// (steady below the rate, bursts above it, heavy-tailed keys), a total cap
// that binds, a defer policy whose queues overflow in bursts, a consumer
// that fails every delivery for the first 10 s (retries without jitter:
// max_backoff = backoff), and an admission limit. They all run at once,
// each on its own shaper: they wait on the trace's clock, not on the CPU,
// so they are started together rather than under t.Parallel, which -parallel
// (GOMAXPROCS by default) would cap at two on a two-core machine.
func TestTuneFidelity(t *testing.T) {
	needBinaries(t)
	cases := []fidelityCase{
		{name: "steady below rate", outflow: "4/s", queue: 50,
			trace: []string{"--rate", "50/s", "--keys", "20", "--seed", "11"}},
		{name: "bursty above rate", outflow: "5/s", queue: 15,
			trace: []string{"--rate", "20/s", "--keys", "10", "--burst-every", "10s", "--burst-for", "2s", "--burst-rate", "300/s", "--seed", "12"}},
		{name: "heavy-tailed keys", outflow: "3/s", queue: 10,
			trace: []string{"--rate", "100/s", "--keys", "200", "--zipf", "1.3", "--seed", "13"}},
		{name: "total cap binds", outflow: "5/s", queue: 5, more: "    total: 20/s\n",
			trace: []string{"--rate", "10/s", "--keys", "40", "--zipf", "1.1", "--burst-every", "10s", "--burst-for", "3s", "--burst-rate", "50/s", "--seed", "14"}},
		{name: "defer in bursts", outflow: "5/s", queue: 10, more: "    overflow: defer\n",
			trace: []string{"--rate", "15/s", "--keys", "10", "--burst-every", "10s", "--burst-for", "2s", "--burst-rate", "120/s", "--seed", "15"}},
		{name: "failing then recovering consumer", outflow: "5/s", queue: 50,
			more:  "    retry: {backoff: 1s, max_backoff: 1s, attempts: 100}\n",
			trace: []string{"--rate", "25/s", "--keys", "10", "--seed", "16"},
			down:  []string{"0s-10s"}},
		{name: "admission limit", outflow: "5/s", queue: 20, more: "    admit: {algorithm: token_bucket, limit: 600/m, burst: 10}\n",
			trace: []string{"--rate", "60/s", "--keys", "5", "--seed", "17"}},
	}
	var wg sync.WaitGroup
	for _, tc := range cases {
		wg.Go(func() {
			t.Run(tc.name, func(t *testing.T) { fidelity(t, tc) })
		})
	}
	wg.Wait()
}

// fidelityCase is a policy fid and a trace to replay and run live.
type fidelityCase struct {
	name    string
	outflow string   // the policy's outflow
	queue   int      // and queue
	more    string   // more lines of the policy, indented for the policy file
	trace   []string // producer trace flags, but for --duration
	down    []string // windows of trace time in which the consumer fails every delivery
}

// fidelityFigures are the figures a replay and a live run are compared by.
type fidelityFigures struct {
	Submitted, Accepted, Rejected, Deferred, Limited, Delivered, Failed, Dead uint64
	WaitP99Ms                                                                 float64 `json:"wait_p99_ms"`
}

// fidelity checks shaper tune's replay of the trace of tc against a live
// run of the same trace.
func fidelity(t *testing.T, tc fidelityCase) {
	cfg := embeddedShaper(t, fmt.Sprintf("policies:\n  - name: fid\n    outflow: %s\n    queue: %d\n%s", tc.outflow, tc.queue, tc.more))
	trace := filepath.Join(t.TempDir(), "trace.csv")
	runBin(t, time.Minute, bins.producer, append([]string{"trace", "--out", trace, "--duration", tuneDuration.String()}, tc.trace...)...)
	var windows []replay.Window
	tuneArgs := []string{"tune", "--policy-file", cfg.policies, "--trace", trace, "--json", "--outflow", tc.outflow, "--queue", strconv.Itoa(tc.queue)}
	for _, s := range tc.down {
		w, err := replay.ParseWindow(s)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, w)
		tuneArgs = append(tuneArgs, "--down", s)
	}

	// The prediction.
	var predicted struct {
		Current    int               `json:"current"`
		Candidates []fidelityFigures `json:"candidates"`
	}
	out := runBin(t, time.Minute, bins.shaper, tuneArgs...)
	if err := json.Unmarshal([]byte(out), &predicted); err != nil || len(predicted.Candidates) != 1 {
		t.Fatalf("shaper tune --json: %v\n%s", err, out)
	}
	pred := predicted.Candidates[predicted.Current]

	// The live run: the producer starts the trace's clock at origin, the
	// consumer fails deliveries in the windows of time since then.
	startShaper(t, cfg)
	origin := time.Now().Add(2 * time.Second) // time to start the producer
	c := newDownstream(t, cfg.clientURL(), "shaper.out.fid.>", origin, windows)
	out = runBin(t, *tuneDuration+80*time.Second, bins.producer, "send", "--http", "http://"+cfg.httpAddr, "--policy", "fid",
		"--trace", trace, "--concurrency", "64", "--json", "--start-at", origin.Format(time.RFC3339Nano))
	var sent struct {
		Sent     int64                 `json:"sent"`
		Outcomes map[string]int64      `json:"outcomes"`
		Details  map[string]int64      `json:"details"`
		LateMs   struct{ P99 float64 } `json:"late_ms"`
	}
	if err := json.Unmarshal([]byte(out), &sent); err != nil {
		t.Fatalf("producer send --json: %v\n%s", err, out)
	}
	limited := sent.Details["429 limited"]
	live := fidelityFigures{
		Submitted: uint64(sent.Sent),
		Accepted:  uint64(sent.Outcomes["queued"]),
		Rejected:  uint64(sent.Outcomes["rejected"] - limited),
		Deferred:  uint64(sent.Outcomes["deferred"]),
		Limited:   uint64(limited),
	}
	if live.Submitted != pred.Submitted || live.Accepted+live.Rejected+live.Deferred+live.Limited != live.Submitted {
		t.Fatalf("live: %d sent, answered %v (%v); the trace has %d submissions", sent.Sent, sent.Outcomes, sent.Details, pred.Submitted)
	}

	// Every job kept is delivered or dead-lettered.
	api, err := client.New("http://"+cfg.httpAddr, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	kept := live.Accepted + live.Deferred
	var got downstreamFigures
	deadline := time.Now().Add(60 * time.Second)
	for {
		got = c.figures()
		p, err := api.Policy(t.Context(), "fid")
		if err != nil {
			t.Fatal(err)
		}
		live.Dead = p.Dead
		if uint64(got.taken)+live.Dead >= kept {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs kept delivered and %d dead-lettered after 60 s", got.taken, kept, live.Dead)
		}
		time.Sleep(50 * time.Millisecond)
	}
	live.Delivered, live.Failed = uint64(got.taken), uint64(got.failed)
	live.WaitP99Ms = percentileMs(got.waits, 0.99)
	t.Logf("%d submissions (late by p99 %.1f ms), predicted / live: accepted %d / %d, rejected %d / %d, deferred %d / %d, limited %d / %d, "+
		"delivered %d / %d, failed attempts %d / %d, dead %d / %d, p99 time in queue %.0f / %.0f ms; %d deliveries of jobs already taken",
		live.Submitted, sent.LateMs.P99, pred.Accepted, live.Accepted, pred.Rejected, live.Rejected, pred.Deferred, live.Deferred,
		pred.Limited, live.Limited, pred.Delivered, live.Delivered, pred.Failed, live.Failed, pred.Dead, live.Dead,
		pred.WaitP99Ms, live.WaitP99Ms, got.redelivered)
	for _, f := range []struct {
		what       string
		pred, live float64
		tol        float64
	}{
		{"accepted", float64(pred.Accepted), float64(live.Accepted), 0.02},
		{"rejected", float64(pred.Rejected), float64(live.Rejected), 0.02},
		{"deferred", float64(pred.Deferred), float64(live.Deferred), 0.02},
		{"limited", float64(pred.Limited), float64(live.Limited), 0.02},
		{"delivered", float64(pred.Delivered), float64(live.Delivered), 0.02},
		{"failed attempts", float64(pred.Failed), float64(live.Failed), 0.02},
		{"dead", float64(pred.Dead), float64(live.Dead), 0.02},
		{"p99 time in queue (ms)", pred.WaitP99Ms, live.WaitP99Ms, 0.10},
	} {
		if math.Abs(f.pred-f.live) > f.tol*f.live {
			t.Errorf("%s: predicted %.1f, live %.1f: off by more than %.0f%%", f.what, f.pred, f.live, 100*f.tol)
		}
	}
}

// runBin runs bin with args to its end, within d, and returns its stdout.
func runBin(t *testing.T, d time.Duration, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
