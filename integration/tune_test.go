package integration

import (
	"context"
	"encoding/json"
	"flag"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper/client"
)

// tuneDuration is the length of TestTuneFidelity's traces; longer runs are
// reported in BENCHMARKS.md.
var tuneDuration = flag.Duration("tune.duration", 40*time.Second, "length of TestTuneFidelity's traces")

// TestTuneFidelity checks that shaper tune predicts what a live shaper
// does: for three made-up traces of 40 s (-tune.duration; steady below the rate, bursts
// above it, heavy-tailed keys), the replay's accepted and rejected counts
// are within 2 % of a live run of the same trace through a real shaper
// (producer send --trace), and its p99 time in queue within 10 % of what a
// consumer subscribed to the deliveries measures (receive time minus
// Shaper-Enqueued-At). The three run at once, each on its own shaper.
func TestTuneFidelity(t *testing.T) {
	needBinaries(t)
	for _, tc := range []struct {
		name, outflow, queue string
		trace                []string
	}{
		{"steady below rate", "4/s", "50",
			[]string{"--rate", "50/s", "--keys", "20", "--seed", "11"}},
		{"bursty above rate", "5/s", "15",
			[]string{"--rate", "20/s", "--keys", "10", "--burst-every", "10s", "--burst-for", "2s", "--burst-rate", "300/s", "--seed", "12"}},
		{"heavy-tailed keys", "3/s", "10",
			[]string{"--rate", "100/s", "--keys", "200", "--zipf", "1.3", "--seed", "13"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fidelity(t, tc.outflow, tc.queue, append([]string{"--duration", tuneDuration.String()}, tc.trace...))
		})
	}
}

// fidelity checks shaper tune's replay of a trace made with traceArgs
// against a live run of the same trace, for a policy fid of the given
// outflow and queue.
func fidelity(t *testing.T, outflow, queue string, traceArgs []string) {
	cfg := embeddedShaper(t, "policies:\n  - name: fid\n    outflow: "+outflow+"\n    queue: "+queue+"\n")
	trace := filepath.Join(t.TempDir(), "trace.csv")
	runBin(t, time.Minute, bins.producer, append([]string{"trace", "--out", trace}, traceArgs...)...)

	// The prediction.
	var predicted struct {
		Candidates []struct {
			Submitted, Accepted, Rejected uint64
			WaitP99Ms                     float64 `json:"wait_p99_ms"`
		} `json:"candidates"`
	}
	out := runBin(t, time.Minute, bins.shaper, "tune", "--policy-file", cfg.policies, "--trace", trace, "--json",
		"--outflow", outflow, "--queue", queue)
	if err := json.Unmarshal([]byte(out), &predicted); err != nil || len(predicted.Candidates) != 1 {
		t.Fatalf("shaper tune --json: %v\n%s", err, out)
	}
	pred := predicted.Candidates[0]

	// The live run, with a consumer timing every delivery.
	startShaper(t, cfg)
	c := meterWaits(t, cfg.clientURL(), "shaper.out.fid.>")
	out = runBin(t, *tuneDuration+80*time.Second, bins.producer, "send", "--http", "http://"+cfg.httpAddr, "--policy", "fid",
		"--trace", trace, "--concurrency", "64", "--json")
	var live struct {
		Sent     int64                 `json:"sent"`
		Outcomes map[string]int64      `json:"outcomes"`
		LateMs   struct{ P99 float64 } `json:"late_ms"`
	}
	if err := json.Unmarshal([]byte(out), &live); err != nil {
		t.Fatalf("producer send --json: %v\n%s", err, out)
	}
	accepted, rejected := live.Outcomes["queued"], live.Outcomes["rejected"]
	if live.Sent != int64(pred.Submitted) || accepted+rejected != live.Sent {
		t.Fatalf("live: %d sent, %d queued, %d rejected (%v); the trace has %d submissions", live.Sent, accepted, rejected, live.Outcomes, pred.Submitted)
	}
	waits := c.wait(t, int(accepted), 60*time.Second)
	liveP99 := percentileMs(waits, 0.99)
	t.Logf("%d submissions: accepted %d predicted, %d live; rejected %d predicted, %d live; p99 time in queue %.0f ms predicted, %.0f ms live (submissions late by p99 %.1f ms)",
		live.Sent, pred.Accepted, accepted, pred.Rejected, rejected, pred.WaitP99Ms, liveP99, live.LateMs.P99)
	for _, f := range []struct {
		what       string
		pred, live float64
		tol        float64
	}{
		{"accepted", float64(pred.Accepted), float64(accepted), 0.02},
		{"rejected", float64(pred.Rejected), float64(rejected), 0.02},
		{"p99 time in queue (ms)", pred.WaitP99Ms, liveP99, 0.10},
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

// waitMeter is a downstream consumer: it answers every delivery at once
// and times it from its Shaper-Enqueued-At header.
type waitMeter struct {
	mu    sync.Mutex
	waits []float64 // ms
}

func meterWaits(t *testing.T, url, subject string) *waitMeter {
	t.Helper()
	c := &waitMeter{}
	nc, err := nats.Connect(url, nats.Name("tune fidelity consumer"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		at := time.Now()
		if m.Reply != "" {
			_ = m.Respond(nil) // taken (confirmed delivery)
		}
		enq, err := time.Parse(time.RFC3339Nano, m.Header.Get(client.HeaderEnqueuedAt))
		if err != nil {
			t.Errorf("a delivery without %s: %v", client.HeaderEnqueuedAt, err)
			return
		}
		c.mu.Lock()
		c.waits = append(c.waits, float64(at.Sub(enq))/float64(time.Millisecond))
		c.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// wait waits for n deliveries, at most d, and returns their waits.
func (c *waitMeter) wait(t *testing.T, n int, d time.Duration) []float64 {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		c.mu.Lock()
		got := len(c.waits)
		c.mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d accepted jobs delivered after %v", got, n, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.waits)
}

// percentileMs returns the nearest-rank p-quantile of ms.
func percentileMs(ms []float64, p float64) float64 {
	if len(ms) == 0 {
		return 0
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)]
}
