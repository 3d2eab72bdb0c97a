package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/queue"
)

// clusterPolicies: "flow" carries the traffic across the failover, with
// confirmed deliveries; "tight" drains one job a second per key into a
// subject nobody needs to hear, and holds 10 jobs per key.
const clusterPolicies = `policies:
  - name: flow
    outflow: 20/s
    queue: 1000
    deliver:
      confirm: true
      timeout: 2s
    retry:
      backoff: 100ms
      max_backoff: 1s
  - name: tight
    outflow: 1/s
    queue: 10
`

// TestClusterNodeLoss runs a shaper on a 3-node JetStream cluster with R3
// queues, kills the node leading the flow queue's stream with SIGKILL while
// jobs are submitted and drained, and checks that every job answered 202 is
// delivered, that every admission during the failover is answered 202 or 503
// within a few seconds, and that a key's queue limit holds exactly before
// and after the failover.
func TestClusterNodeLoss(t *testing.T) {
	needBinaries(t)
	cluster := startCluster(t, 3)
	_, js := cluster.connect(t)
	cfg := shaperConfig{
		policies: writePolicies(t, clusterPolicies),
		httpAddr: fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0]),
		natsURL:  cluster.urls(),
		replicas: 3,
	}
	startShaper(t, cfg)
	rec := record(t, cfg.clientURL(), "shaper.out.flow.>")
	sub := newSubmitter(cfg.httpAddr, 15*time.Second)

	burst(t, sub, "tight", "burst-before", 30, 10)

	leader := streamLeader(t, js, "SHAPER_Q_flow")
	victim := cluster.node(leader)
	if victim == nil {
		t.Fatalf("stream leader %q is none of the cluster's nodes", leader)
	}

	// Submit steadily over 5 keys (about 50 jobs a second, well under the
	// 100 a second the keys drain) until well after the failover.
	const keys = 5
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu      sync.Mutex
		ids     []string
		answers []timedAnswer
		wg      sync.WaitGroup
	)
	start := time.Now()
	for k := range keys {
		wg.Go(func() {
			key := fmt.Sprintf("key%d", k)
			for i := 0; ctx.Err() == nil; i++ {
				at := time.Now()
				a := sub.submit(context.Background(), "flow", key, fmt.Sprintf("job %d", i))
				mu.Lock()
				answers = append(answers, timedAnswer{answer: a, at: at.Sub(start)})
				if a.code == http.StatusAccepted {
					ids = append(ids, a.id)
				}
				mu.Unlock()
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
			}
		})
	}
	accepted := func() int { mu.Lock(); defer mu.Unlock(); return len(ids) }

	waitFor(t, 20*time.Second, "100 jobs accepted before the kill", func() bool { return accepted() >= 100 })
	victim.p.kill()
	killedAt := time.Since(start)
	t.Logf("killed %s (leader of SHAPER_Q_flow) at +%v with %d jobs accepted and %d delivered",
		victim.name, killedAt.Round(time.Millisecond), accepted(), rec.delivered())

	// Keep submitting until 3 s of admissions after the kill were all 202,
	// at most 30 s.
	recovered := func() bool {
		mu.Lock()
		defer mu.Unlock()
		ok := 0
		for i := len(answers) - 1; i >= 0 && answers[i].at > killedAt; i-- {
			if answers[i].code != http.StatusAccepted {
				break
			}
			ok++
		}
		return ok >= 3*10*keys
	}
	waitFor(t, 30*time.Second, "3 s of 202s after the kill", recovered)
	cancel()
	wg.Wait()

	var (
		byCode            = map[int]int{}
		slowest           time.Duration
		firstBad, lastBad time.Duration = -1, -1
		failures          []string
	)
	sort.Slice(answers, func(i, j int) bool { return answers[i].at < answers[j].at })
	for _, a := range answers {
		byCode[a.code]++
		slowest = max(slowest, a.latency)
		if a.code != http.StatusAccepted {
			if firstBad < 0 {
				firstBad = a.at
			}
			lastBad = a.at + a.latency
		}
		if a.code != http.StatusAccepted && a.code != http.StatusServiceUnavailable {
			failures = append(failures, fmt.Sprintf("+%v: %d %v", a.at.Round(time.Millisecond), a.code, a.err))
		}
	}
	t.Logf("admissions: %d in all, by status %v; slowest %v", len(answers), byCode, slowest.Round(time.Millisecond))
	if lastBad >= 0 {
		t.Logf("admissions unavailable from +%v to +%v: %v after the kill", firstBad.Round(time.Millisecond),
			lastBad.Round(time.Millisecond), (lastBad - killedAt).Round(time.Millisecond))
	} else {
		t.Logf("no admission failed across the failover")
	}
	if len(failures) > 0 {
		t.Errorf("%d admissions answered other than 202 or 503 across the failover, e.g. %v", len(failures), firstFew(failures, 5))
	}
	if slowest > 6*time.Second {
		t.Errorf("slowest admission took %v, want at most 6s (the admission path is bounded by the queue timeout)", slowest)
	}

	// The tight queue's stream may have lost its leader too: wait until it
	// admits again before bursting.
	waitFor(t, 30*time.Second, "tight to admit after the failover", func() bool {
		return sub.submit(context.Background(), "tight", "probe", "probe").code == http.StatusAccepted
	})
	burst(t, sub, "tight", "burst-after", 30, 10)

	rep := rec.waitAll(ids, 60*time.Second)
	t.Logf("deliveries: %d of %d jobs, %d duplicate deliveries over %d jobs, %d unknown ids, the last %v after the kill; longest pause between deliveries after the kill: %v",
		len(ids)-len(rep.missing), len(ids), rep.duplicates, rep.dupJobs, rep.unknown,
		(rec.lastAt().Sub(start) - killedAt).Round(time.Millisecond), rec.longestGap(start.Add(killedAt)).Round(time.Millisecond))
	if len(rep.missing) > 0 {
		states, err := policyStates(cfg.httpAddr)
		t.Logf("shaper's view: %+v (err %v)", states["flow"], err)
		t.Logf("where the missing jobs are: %s", findJobs(js, "SHAPER_Q_flow", rep.missing))
		t.Fatalf("%d of %d jobs answered 202 were never delivered after losing %s, e.g. %v",
			len(rep.missing), len(ids), victim.name, firstFew(rep.missing, 5))
	}
	if rep.duplicates > 2*keys {
		t.Errorf("%d duplicate deliveries after losing one node, want at most %d", rep.duplicates, 2*keys)
	}
	notReadyWithoutQuorum(t, cluster, victim, cfg.httpAddr)
}

// notReadyWithoutQuorum kills a second node of the 3-node cluster (the
// first, lost, is lost): the shaper stays connected to the last, which
// stores nothing without a quorum. /readyz and `shaper health` say it is
// not ready, with the reason, within a few seconds (the image's
// HEALTHCHECK and a load balancer rely on it), and `shaper status` says
// so below its figures.
func notReadyWithoutQuorum(t *testing.T, cluster *natsCluster, lost *natsNode, addr string) {
	for _, n := range cluster.nodes {
		if n != lost {
			n.p.kill()
			break
		}
	}
	killed := time.Now()
	// If the shaper was connected to the node just killed, it first
	// answers "nats RECONNECTING" (true, and not ready either) until it
	// reconnects to the last node; the answer that must come, and stay,
	// is the one naming the lost quorum.
	var status string
	var seen []string
	waitFor(t, 15*time.Second, "/readyz to say JetStream stores nothing without a quorum", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct{ Status string }
		json.NewDecoder(resp.Body).Decode(&body)
		if body.Status != status {
			seen = append(seen, fmt.Sprintf("%d %q at +%v", resp.StatusCode, body.Status, time.Since(killed).Round(time.Millisecond)))
		}
		status = body.Status
		return resp.StatusCode == http.StatusServiceUnavailable && strings.HasPrefix(status, "JetStream stores nothing")
	})
	t.Logf("two nodes of three lost: /readyz answered %s", strings.Join(seen, ", then "))
	health := startProc(t, "shaper health", bins.shaper, "health", "--http", addr)
	if code, _ := health.wait(15 * time.Second); code != 1 || !strings.Contains(health.out.String(), "not ready") {
		t.Errorf("shaper health without a quorum: exit %d, %q; want exit 1, not ready", code, health.out.String())
	}
	// status answers from memory, and says why no job is accepted.
	st := startProc(t, "shaper status", bins.shaper, "status", "--http", addr)
	st.wait(15 * time.Second)
	if out := st.out.String(); !strings.Contains(out, "not ready: JetStream stores nothing") {
		t.Errorf("shaper status without a quorum:\n%s\nwant a line not ready: JetStream stores nothing …", out)
	}
}

type timedAnswer struct {
	answer
	at time.Duration // since the start of the submissions
}

// burst submits n jobs to one key at once, while its queue drains at one a
// second, and checks that exactly want are accepted and the rest get 429.
func burst(t *testing.T, s *submitter, policy, key string, n, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	codes := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			a := s.submit(ctx, policy, key, fmt.Sprintf("burst %d", i))
			codes[i], errs[i] = a.code, a.err
		})
	}
	wg.Wait()
	took := time.Since(start)
	byCode := map[int]int{}
	for _, c := range codes {
		byCode[c]++
	}
	t.Logf("burst of %d to %s/%s in %v: %v", n, policy, key, took.Round(time.Millisecond), byCode)
	if byCode[http.StatusAccepted] != want || byCode[http.StatusTooManyRequests] != n-want {
		for i, c := range codes {
			if c != http.StatusAccepted && c != http.StatusTooManyRequests {
				t.Logf("burst answer %d: %d %v", i, c, errs[i])
			}
		}
		t.Errorf("burst of %d to %s/%s (queue %d): %d accepted and %d refused with 429, want %d and %d",
			n, policy, key, want, byCode[http.StatusAccepted], byCode[http.StatusTooManyRequests], want, n-want)
	}
}

// findJobs says where the jobs with the given ids are in stream: the seq and
// subject of each one still stored, and the stream's state, for a failure
// report.
func findJobs(js jetstream.JetStream, stream string, ids []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return "stream: " + err.Error()
	}
	info, err := st.Info(ctx)
	if err != nil {
		return "stream info: " + err.Error()
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var found []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		id := m.Header.Get("Shaper-Job-Id")
		if id == "" { // a job named after where it is stored
			id = queue.JobID(queue.EpochOf(info.Created), seq)
		}
		if want[id] {
			found = append(found, fmt.Sprintf("%s at seq %d on %s (stored %s)", id, seq, m.Subject, m.Time.Format(time.StampMilli)))
		}
	}
	leader := ""
	if info.Cluster != nil {
		leader = info.Cluster.Leader
	}
	return fmt.Sprintf("stream state %+v, leader %s; still stored: %v", info.State, leader, found)
}
