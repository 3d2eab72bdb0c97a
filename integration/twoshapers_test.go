package integration

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
)

// twoShaperPolicies: "global" holds 20 jobs per key and drains 10 a second
// per key, confirmed by the recorder; "adm" admits 5 jobs per key per
// fixed 10-second window, with its limiter state in Redis (fail: open by
// default), and drains into a subject nobody needs to hear.
const twoShaperPolicies = `policies:
  - name: global
    outflow: 10/s
    queue: 20
    overflow: reject
    deliver:
      confirm: true
      timeout: 2s
    retry:
      backoff: 100ms
      max_backoff: 1s
  - name: adm
    outflow: 10/s
    queue: 100
    admit:
      algorithm: fixed_window
      limit: 5/10s
`

// TestTwoShapersOnCluster runs two shaper processes on one 3-node JetStream
// cluster with R3 streams and one Redis, and checks the guarantees that
// must hold globally (docs/architecture.md, "Guarantees"): a key's queue limit and outflow rate hold
// over both shapers (only the holder of the policy's drain lease drains),
// admission limits are shared through Redis; when the draining shaper is
// killed with SIGKILL the other takes the drain over within the lease TTL
// and delivers every job answered 202; when Redis goes away admissions go
// on promptly as the policy's fail setting says.
func TestTwoShapersOnCluster(t *testing.T) {
	needBinaries(t)
	cluster := startCluster(t, 3)
	redis := testenv.StartRedis(t)
	ports := freePorts(t, 2)
	var (
		cfgs [2]shaperConfig
		shs  [2]*proc
		subs [2]*submitter
	)
	policyFile := writePolicies(t, twoShaperPolicies)
	for i := range cfgs {
		cfgs[i] = shaperConfig{
			policies: policyFile,
			httpAddr: fmt.Sprintf("127.0.0.1:%d", ports[i]),
			natsURL:  cluster.urls(),
			replicas: 3,
			redisURL: "redis://" + redis.Addr(),
		}
		shs[i] = startShaper(t, cfgs[i])
		subs[i] = newSubmitter(cfgs[i].httpAddr, 15*time.Second)
	}
	rec := record(t, cluster.urls(), "shaper.out.global.>")

	// Exactly one shaper drains "global".
	var drainer int
	waitFor(t, 10*time.Second, "exactly one shaper to report draining global", func() bool {
		n := 0
		for i, c := range cfgs {
			ps, err := policyStates(c.httpAddr)
			if err == nil && ps["global"].Draining {
				n, drainer = n+1, i
			}
		}
		return n == 1
	})
	other := 1 - drainer
	t.Logf("%s drains global, %s only admits", shs[drainer].name, shs[other].name)

	// Policy global: a burst of 60 to one key, spread over both shapers.
	var (
		mu       sync.Mutex
		accepted []string // every job of global answered 202
	)
	const burstN, queueSize = 60, 20
	codes := make([]int, burstN)
	var wg sync.WaitGroup
	burstStart := time.Now()
	for i := range burstN {
		wg.Go(func() {
			a := subs[i%2].submit(context.Background(), "global", "hot", fmt.Sprintf("burst %d", i))
			codes[i] = a.code
			if a.code == http.StatusAccepted {
				mu.Lock()
				accepted = append(accepted, a.id)
				mu.Unlock()
			} else if a.code != http.StatusTooManyRequests {
				t.Errorf("burst submission %d to %s = %d (%v), want 202 or 429", i, cfgs[i%2].httpAddr, a.code, a.err)
			}
		})
	}
	wg.Wait()
	burstTook := time.Since(burstStart)
	byCode := map[int]int{}
	for _, c := range codes {
		byCode[c]++
	}
	// The drain frees a slot every 100 ms once it has started: allow those.
	most := queueSize + 2 + int(burstTook/(100*time.Millisecond))
	t.Logf("burst of %d to global/hot over both shapers in %v: %v (want %d to %d × 202)",
		burstN, burstTook.Round(time.Millisecond), byCode, queueSize, most)
	if n := byCode[http.StatusAccepted]; n < queueSize || n > most {
		t.Errorf("burst of %d to one key of queue %d over two shapers: %d answered 202, want %d to %d: the per-key queue limit does not hold globally",
			burstN, queueSize, n, queueSize, most)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Policy adm: 5 admissions per 10-second window, counted in Redis.
	// Start early in a window so that the ten submissions fit in one.
	if left := 10*time.Second - time.Duration(time.Now().UnixNano())%(10*time.Second); left < 3*time.Second {
		time.Sleep(left + 50*time.Millisecond)
	}
	var admCodes []int
	admitted := 0
	for i := range 10 {
		a := subs[i%2].submit(context.Background(), "adm", "acme", fmt.Sprintf("adm %d", i))
		admCodes = append(admCodes, a.code)
		switch a.code {
		case http.StatusAccepted:
			admitted++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("adm submission %d to %s = %d (%v), want 202 or 429", i, cfgs[i%2].httpAddr, a.code, a.err)
		}
	}
	t.Logf("10 submissions to adm/acme alternating between the shapers: %v", admCodes)
	if admitted != 5 {
		t.Errorf("10 submissions to one key of a 5/10s fixed window, alternating between two shapers sharing Redis: %d answered 202, want 5 (codes %v)",
			admitted, admCodes)
	}

	// Load the drain, then kill the draining shaper while it drains.
	waitFor(t, 30*time.Second, "the burst to be delivered", func() bool { return len(rec.report(accepted).missing) == 0 })
	const keys, perKey = 5, 20
	for i := range subs {
		ids, _ := submitAll(t, subs[i], "global", keys, perKey/2)
		accepted = append(accepted, ids...)
	}
	inBurst := byCode[http.StatusAccepted]
	waitFor(t, 30*time.Second, "10 jobs of the second load delivered", func() bool { return rec.delivered() >= inBurst+10 })
	if err := syscall.Kill(shs[drainer].pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	shs[drainer].wait(10 * time.Second)
	atKill := rec.delivered()
	t.Logf("kill -9 of %s after %d of %d jobs of global delivered", shs[drainer].name, atKill, len(accepted))
	if atKill >= len(accepted) {
		t.Fatalf("all %d jobs were delivered before the kill: the test did not kill a draining shaper", len(accepted))
	}
	var takeover time.Duration
	waitFor(t, 20*time.Second, shs[other].name+" to drain global", func() bool {
		ps, err := policyStates(cfgs[other].httpAddr)
		if err == nil && ps["global"].Draining {
			takeover = time.Since(killedAt)
			return true
		}
		return false
	})
	rep := rec.waitAll(accepted, 60*time.Second)
	resumed := rec.firstAfter(killedAt.Add(time.Second)) // the killed shaper delivers nothing a second later
	t.Logf("%s took the drain over %v after the kill; deliveries resumed %v after the kill; all delivered %v after the kill",
		shs[other].name, takeover.Round(time.Millisecond), resumed.Sub(killedAt).Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))
	t.Logf("deliveries of global: %d of %d jobs answered 202, %d deliveries in all, %d duplicate deliveries over %d jobs, %d unknown ids",
		len(accepted)-len(rep.missing), len(accepted), rep.total, rep.duplicates, rep.dupJobs, rep.unknown)
	if takeover > 10*time.Second {
		t.Errorf("%s took the drain of global over %v after the kill, want at most 10s (lease TTL %v)", shs[other].name, takeover, 6*time.Second)
	}
	if len(rep.missing) > 0 {
		t.Errorf("%d of %d jobs answered 202 were never delivered after the draining shaper was killed, e.g. %v",
			len(rep.missing), len(accepted), firstFew(rep.missing, 5))
	}
	if rep.duplicates > 2*(keys+1) {
		t.Errorf("%d duplicate deliveries after one crash, want at most %d (about one per key)", rep.duplicates, 2*(keys+1))
	}
	if rep.unknown > 0 {
		t.Errorf("%d delivered job ids were never answered 202", rep.unknown)
	}

	// The rate of each key held globally: at most ⌈1 s × 10/s⌉+1 = 11
	// deliveries in any second, with one for scheduling noise.
	for _, key := range append([]string{"hot"}, keyNames(keys)...) {
		n, at := busiestSecond(rec.keyTimes(key))
		if n > 12 {
			t.Errorf("key %s of global (10/s): %d deliveries in the second from %v, want at most 12: the rate does not hold over two shapers",
				key, n, at.Sub(burstStart).Round(time.Millisecond))
		} else {
			t.Logf("key %s: at most %d deliveries in any second", key, n)
		}
	}

	// Without Redis, adm admits as its fail setting says (open), promptly.
	redis.Stop()
	var slowest time.Duration
	var lost []string
	for i := range 5 {
		a := subs[other].submit(context.Background(), "adm", fmt.Sprintf("noredis%d", i), "no redis")
		slowest = max(slowest, a.latency)
		if a.code != http.StatusAccepted {
			lost = append(lost, fmt.Sprintf("%d %v", a.code, a.err))
		}
	}
	var limiterErrs uint64
	if ps, err := policyStates(cfgs[other].httpAddr); err == nil {
		limiterErrs = ps["adm"].LimiterErrors
	}
	t.Logf("with Redis stopped: 5 admissions to adm, slowest %v; the shaper reports %d limiter errors",
		slowest.Round(time.Millisecond), limiterErrs)
	if len(lost) > 0 {
		t.Errorf("with Redis stopped, a policy with fail: open answered %d of 5 submissions other than 202: %s",
			len(lost), strings.Join(lost, "; "))
	}
	if slowest > 2*time.Second {
		t.Errorf("with Redis stopped, the slowest admission took %v, want under 2s", slowest)
	}
}

// keyNames returns the key names submitAll uses for n keys.
func keyNames(n int) []string {
	var ks []string
	for k := range n {
		ks = append(ks, fmt.Sprintf("k%02d", k))
	}
	return ks
}

// busiestSecond returns the most times that lie within one second of each
// other, and the first of them.
func busiestSecond(times []time.Time) (int, time.Time) {
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	best, at := 0, time.Time{}
	i := 0
	for j := range times {
		for times[j].Sub(times[i]) >= time.Second {
			i++
		}
		if n := j - i + 1; n > best {
			best, at = n, times[i]
		}
	}
	return best, at
}
