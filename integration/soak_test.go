package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/client"
)

var (
	soakDuration = flag.Duration("soak.duration", 90*time.Second, "load phase of TestSoak")
	soakBaseline = flag.String("soak.baseline", "", "TestSoak also soaks this shaper binary (a baseline), in the same run")
	soakCapacity = flag.Bool("soak.capacity", false, "TestSoak first measures the drain's capacity and loads it at 75 % of that")
)

// The soak's policy: 100 keys draining at 20 jobs a second each, so the
// drain's capacity is 2,000 jobs a second unless the machine delivers
// fewer; confirmed delivery to a consumer that replies. Every other
// setting is the default (embedded JetStream, job status, workers).
const (
	soakKeys    = 100
	soakOutflow = 20 // per key per second
	soakPolicy  = `policies:
  - name: soak
    outflow: 20/s
    queue: 1000
    deliver:
      confirm: true
      timeout: 5s
`
	// soakBound is the RSS growth per delivered job TestSoak accepts: well
	// below the 156–240 bytes a job that one job record each cost (the old
	// binary in the 10-minute soak of BENCHMARKS.md), well above what this
	// one shows (5.9 bytes a job over ten minutes).
	soakBound = 80.0
	// soakTrough is how far back the trough line under RSS looks: longer
	// than the 15 s or so the queue stream takes to fill one 8 MB block at
	// the soak's load (see envelope).
	soakTrough = 20 * time.Second
)

// TestSoak loads a shaper with default settings at 75 % of its drain's
// capacity (1,500 jobs a second over 100 keys) for -soak.duration (90 s
// unless told), with a consumer that subscribes and replies like a real
// one, samples the process's RSS from outside (/proc/PID/status) every
// second, and checks
// that every job answered 202 is received and that memory does not grow
// with the jobs delivered: the slope of RSS's troughs over jobs delivered,
// after a warm-up of a quarter of the run, stays under 80 bytes a job (the
// per-job job records cost ~240). GET /v1/jobs/{id} must still answer
// "delivered" for delivered jobs.
//
// The benchmark in BENCHMARKS.md is the same test, longer, with a baseline:
//
//	go test ./integration -run TestSoak -v -timeout 60m -soak.capacity \
//	    -soak.duration 10m -soak.baseline /path/to/old/shaper
func TestSoak(t *testing.T) {
	needBinaries(t)
	runs := []struct{ name, bin string }{{"this", bins.shaper}}
	if *soakBaseline != "" {
		runs = append(runs, struct{ name, bin string }{"baseline", *soakBaseline})
	}
	results := map[string]soakResult{}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			res := soak(t, run.bin, *soakDuration)
			results[run.name] = res
			if run.name == "this" && res.slopeJobs < int(res.rate*float64(*soakDuration/time.Second))/4 {
				t.Errorf("the shaper fell %d jobs behind the load (more than 3 s of it) %v into the run: the machine is too busy to tell memory growth from the backlog's", res.backlog, res.behindAt)
			}
			if run.name == "this" && !(res.perJob <= soakBound) {
				t.Errorf("RSS's troughs grew %.0f bytes per delivered job over %d jobs (%.1f → %.1f MB), want at most %.0f: memory grows with the jobs delivered",
					res.perJob, res.slopeJobs, res.slopeFrom/1e6, res.slopeTo/1e6, soakBound)
			}
		})
	}
	for name, r := range results {
		t.Logf("%s: %s", name, r)
	}
}

// soakResult is what one soak measured.
type soakResult struct {
	capacity  float64       // deliveries a second under backlog (0: not measured)
	rate      float64       // submissions a second asked for
	accepted  int           // jobs answered 202 in the load phase
	refused   int           // answered otherwise
	delivered int           // of those, received by the consumer
	dups      int           // deliveries beyond the first
	early     rssSample     // after one minute of load (or a quarter of it)
	late      rssSample     // after ten minutes (or at the end)
	backlog   int           // jobs answered 202 and not yet received, at most
	behindAt  time.Duration // when the backlog first passed 3 s of load (0: never)
	perJob    float64       // slope of RSS's troughs over jobs delivered from the warm-up until behindAt, bytes a job
	rawPerJob float64       // the same through every sample, sawtooth and all
	slopeJobs int           // jobs delivered over the slope's samples
	slopeFrom float64       // fitted RSS at the slope's first and last samples
	slopeTo   float64
	cpuPerJob time.Duration // the shaper's CPU (user+system) per delivered job in the load phase
	status    string        // GET /v1/jobs of sampled delivered jobs
}

func (r soakResult) String() string {
	behind := "never"
	if r.behindAt > 0 {
		behind = "from " + r.behindAt.String()
	}
	return fmt.Sprintf("capacity %.0f/s, load %.0f/s: %d answered 202 (%d refused), %d received, %d duplicates; RSS %.1f MB at %v, %.1f MB at %v (%+.1f %%); backlog %d and %d jobs then, %d at most, over 3 s of load %s; troughs' slope %.1f bytes a job over %d jobs (%.1f → %.1f MB), every sample's %.1f; CPU %v a job; job status: %s",
		r.capacity, r.rate, r.accepted, r.refused, r.delivered, r.dups, r.early.rss/1e6, r.early.at.Round(time.Second), r.late.rss/1e6, r.late.at.Round(time.Second),
		100*(r.late.rss-r.early.rss)/r.early.rss, r.early.backlog, r.late.backlog, r.backlog, behind, r.perJob, r.slopeJobs, r.slopeFrom/1e6, r.slopeTo/1e6,
		r.rawPerJob, r.cpuPerJob, r.status)
}

// soak runs one shaper binary through the soak and returns what it
// measured. It fails t when a job answered 202 is not received or a
// delivered job's status is not "delivered".
func soak(t *testing.T, bin string, load time.Duration) soakResult {
	cfg := embeddedShaper(t, soakPolicy)
	cfg.bin = bin
	sh := startShaper(t, cfg)
	con := consume(t, cfg.clientURL(), "shaper.out.soak.>")
	sub := newSubmitter(cfg.httpAddr, 10*time.Second)
	var res soakResult
	capacity := float64(soakKeys * soakOutflow)
	if *soakCapacity {
		res.capacity = measureCapacity(t, sub, con)
		capacity = min(capacity, res.capacity)
		t.Logf("drain capacity: %.0f deliveries a second under backlog (the policy allows %d)", res.capacity, soakKeys*soakOutflow)
	}
	res.rate = 0.75 * capacity
	first := con.received()

	var (
		samples  []rssSample
		answered atomic.Int64 // jobs answered 202 so far
	)
	start := time.Now()
	cpu0 := cpuTime(t, sh.pid())
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for range tick.C {
			at := time.Since(start)
			if at > load {
				return
			}
			delivered := con.received() - first
			samples = append(samples, rssSample{at: at, rss: rss(t, sh.pid()), delivered: delivered, backlog: int(answered.Load()) - delivered})
		}
	}()
	accepted, refused, probe := submitPaced(t, sub, res.rate, load, &answered)
	<-sampling
	cpu := cpuTime(t, sh.pid()) - cpu0
	res.accepted, res.refused = len(accepted), refused

	deadline := time.Now().Add(60 * time.Second)
	for con.missing(accepted) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	missing := con.missing(accepted)
	res.delivered, res.dups = len(accepted)-missing, con.duplicates()
	if missing > 0 {
		t.Errorf("%d of %d jobs answered 202 never received", missing, len(accepted))
	}
	if bad := con.failure(); bad != "" {
		t.Errorf("consumer: %s", bad)
	}
	res.status = checkDelivered(t, cfg.httpAddr, probe)
	res.cpuPerJob = cpu / time.Duration(max(res.delivered, 1))
	res.early, res.late = sampleAt(samples, min(time.Minute, load/4)), sampleAt(samples, min(10*time.Minute, load))
	// A backlog costs memory of its own, and the runtime returns it slowly:
	// the slope is taken over the stretch before the shaper first fell
	// more than 3 s of load behind (a machine too busy to keep up).
	steady := samples
	for i, s := range samples {
		res.backlog = max(res.backlog, s.backlog)
		if res.behindAt == 0 && float64(s.backlog) > 3*res.rate {
			res.behindAt, steady = s.at.Round(time.Second), samples[:i]
		}
	}
	res.perJob, res.slopeJobs, res.slopeFrom, res.slopeTo = slope(envelope(steady, load/4, soakTrough), 0)
	res.rawPerJob, _, _, _ = slope(steady, load/4)
	t.Logf("%s", res)
	if os.Getenv("SOAK_SAMPLES") != "" {
		var b strings.Builder
		for _, s := range samples {
			fmt.Fprintf(&b, "%.0f %.2f %d %d\n", s.at.Seconds(), s.rss/1e6, s.delivered, s.backlog)
		}
		t.Logf("samples (s, MB, delivered, backlog):\n%s", b.String())
	}
	return res
}

// measureCapacity fills every key with a backlog, 64 submissions at a
// time, and returns the deliveries a second over 5 s once it is filled,
// while every key still has jobs queued; then waits until it is delivered.
func measureCapacity(t *testing.T, sub *submitter, con *consumer) float64 {
	t.Helper()
	const perKey = 500 // 25 s of backlog at the policy's rate
	before := con.received()
	var (
		wg     sync.WaitGroup
		next   atomic.Int64
		failed atomic.Int64
	)
	for range 64 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < soakKeys*perKey; i = next.Add(1) - 1 {
				key := "k" + strconv.Itoa(int(i%soakKeys))
				if a := sub.submit(context.Background(), "soak", key, "backlog"); a.code != http.StatusAccepted {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d backlog submissions not answered 202", n, soakKeys*perKey)
	}
	n0, t0 := con.received(), time.Now()
	time.Sleep(5 * time.Second)
	n1, t1 := con.received(), time.Now()
	if left := soakKeys*perKey - (n1 - before); left < soakKeys*10 {
		t.Fatalf("only %d jobs of the backlog were left at the end of the window: the capacity cannot be told", left)
	}
	waitFor(t, 90*time.Second, "the backlog to be delivered", func() bool { return con.received()-before >= soakKeys*perKey })
	return float64(n1-n0) / t1.Sub(t0).Seconds()
}

// submitPaced submits jobs to the soak policy's keys, round robin, at rate
// a second for d, counting those answered 202 in answered, and returns
// their sequences, how many were answered otherwise, and a few ids of the
// first jobs.
func submitPaced(t *testing.T, sub *submitter, rate float64, d time.Duration, answered *atomic.Int64) (accepted []uint64, refused int, probe []string) {
	t.Helper()
	var (
		mu   sync.Mutex
		errs = map[string]int{}
		wg   sync.WaitGroup
	)
	tokens := make(chan int64, 1024)
	start := time.Now()
	for range 32 {
		wg.Go(func() {
			for i := range tokens {
				key := "k" + strconv.Itoa(int(i%soakKeys))
				a := sub.submit(context.Background(), "soak", key, "soak job "+strconv.FormatInt(i, 10))
				mu.Lock()
				if a.code == http.StatusAccepted {
					answered.Add(1)
					if _, seq, ok := queue.ParseJobID(a.id); ok {
						accepted = append(accepted, seq)
					} else {
						errs["202 with an id not named after its place: "+a.id]++
					}
					if i < 100 && i%20 == 0 {
						probe = append(probe, a.id)
					}
				} else {
					refused++
					errs[fmt.Sprint(a.code, " ", a.err)]++
				}
				mu.Unlock()
			}
		})
	}
	interval := time.Duration(float64(time.Second) / rate)
	for i, at := int64(0), start; time.Since(start) < d; i, at = i+1, at.Add(interval) {
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		tokens <- i
	}
	close(tokens)
	wg.Wait()
	for e, n := range errs {
		t.Errorf("%d submissions: %s", n, e)
	}
	return accepted, refused, probe
}

// checkDelivered asks GET /v1/jobs/{id} of each id, which must answer
// "delivered", and says what it found.
func checkDelivered(t *testing.T, addr string, ids []string) string {
	t.Helper()
	counts := map[string]int{}
	for _, id := range ids {
		j, err := jobState(addr, id)
		switch {
		case errors.Is(err, client.ErrNotFound):
			counts["404"]++
		case err != nil:
			counts[err.Error()]++
		default:
			counts[fmt.Sprint(j.Status)]++
		}
		if err != nil || j.Status != client.JobDelivered {
			t.Errorf("GET /v1/jobs/%s of a delivered job = %+v, %v; want delivered", id, j, err)
		}
	}
	return fmt.Sprint(counts)
}
