package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// failoverPolicy drains each key at 20 jobs a second, confirmed by the
// recorder, so a pause in the deliveries shows within 50 ms.
var failoverPolicy = confirmedPolicy("flow", "20/s", 1000)

// TestElectionUnderLoneShaper runs one shaper on a 3-node JetStream
// cluster and kills, with SIGKILL, the node leading both the policy's
// queue stream and the lease bucket while the shaper drains a backlog. The
// shaper must not stop draining, nor log losing its lease: it is the only
// shaper, and its lease is still its own. Deliveries may pause for the
// election (measured from here: until the queue stream answers with a new
// leader), and a little more for the drain's one-second retry of a failed
// read; every job is delivered.
func TestElectionUnderLoneShaper(t *testing.T) {
	needBinaries(t)
	cluster := startCluster(t, 3)
	cfg := shaperConfig{
		policies: writePolicies(t, failoverPolicy),
		httpAddr: fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0]),
		natsURL:  cluster.urls(),
		replicas: 3,
	}
	sh := startShaper(t, cfg)
	rec := record(t, cluster.urls(), "shaper.out.flow.>")
	sub := newSubmitter(cfg.httpAddr, 15*time.Second)
	const keys, perKey = 5, 200 // 10 s of deliveries at 5 × 20/s
	ids, _ := submitAll(t, sub, "flow", keys, perKey)

	_, js := cluster.connect(t)
	victim := cluster.node(streamLeader(t, js, "SHAPER_Q_flow"))
	stepDownTo(t, js, "KV_SHAPER_LEASES", victim.name)
	var survivor *natsNode
	for _, n := range cluster.nodes {
		if n != victim {
			survivor = n
		}
	}
	watcher, err := nats.Connect(survivor.url())
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	wjs, _ := jetstream.New(watcher)

	waitFor(t, 20*time.Second, "200 deliveries before the kill", func() bool { return rec.delivered() >= 200 })
	killedAt := time.Now()
	victim.p.kill()
	atKill := rec.delivered()
	// Deliveries need both streams: the queue's, and the leases bucket's,
	// whose renewals the lease fence waits for. Each elects on its own.
	var (
		wg       sync.WaitGroup
		queueAt  time.Time
		leasesAt time.Time
		qok, lok bool
	)
	wg.Go(func() { queueAt, qok = newLeaderAt(wjs, "SHAPER_Q_flow", victim.name, 30*time.Second) })
	wg.Go(func() { leasesAt, lok = newLeaderAt(wjs, "KV_SHAPER_LEASES", victim.name, 30*time.Second) })
	wg.Wait()
	if !qok || !lok {
		t.Fatalf("no new leader within 30 s of losing %s: queue %v, leases %v", victim.name, qok, lok)
	}
	elected := queueAt.Sub(killedAt)
	if l := leasesAt.Sub(killedAt); l > elected {
		t.Logf("the leases bucket elected %v after the kill, after the queue's stream (%v)", l.Round(time.Millisecond), elected.Round(time.Millisecond))
		elected = l
	}

	rep := rec.waitAll(ids, 90*time.Second)
	gap := rec.longestGap(killedAt.Add(-time.Second))
	lost := grepLines(sh.out.String(), "stopped draining policy")
	failing := grepLines(sh.out.String(), "renewal failing")
	t.Logf("killed %s (leader of SHAPER_Q_flow and KV_SHAPER_LEASES) with %d of %d jobs delivered; the stream answered with a new leader %v after the kill",
		victim.name, atKill, len(ids), elected.Round(time.Millisecond))
	t.Logf("longest pause between deliveries around the kill: %v (election %v); %d of %d delivered, %d duplicate deliveries; lease renewal failures logged: %d",
		gap.Round(time.Millisecond), elected.Round(time.Millisecond), len(ids)-len(rep.missing), len(ids), rep.duplicates, len(failing))
	if len(rep.missing) > 0 {
		t.Fatalf("%d of %d jobs answered 202 never delivered, e.g. %v", len(rep.missing), len(ids), firstFew(rep.missing, 5))
	}
	if len(lost) > 0 {
		t.Errorf("the only shaper stopped draining during the election: %s", strings.Join(lost, "; "))
	}
	if limit := elected + 1500*time.Millisecond; gap > limit {
		t.Errorf("deliveries paused %v, want at most the later election of the queue and the leases bucket (%v) plus 1.5 s", gap, elected)
	}
}

// TestKill9DrainingShaper runs two shapers on a 3-node JetStream cluster,
// kills the one draining a backlog over 10 keys with SIGKILL, and measures
// how soon the other takes the drain over (at most the lease's lifetime,
// 6 s, after the killed one's last renewal) and how many jobs are
// delivered twice: at most the one in flight per key.
func TestKill9DrainingShaper(t *testing.T) {
	needBinaries(t)
	cluster, cfgs, shs, drainer := twoShapers(t, failoverPolicy, "flow")
	rec := record(t, cluster.urls(), "shaper.out.flow.>")
	other := 1 - drainer
	const keys, perKey = 10, 150 // 7.5 s of deliveries per key
	ids, _ := submitAll(t, newSubmitter(cfgs[drainer].httpAddr, 15*time.Second), "flow", keys, perKey)
	waitFor(t, 20*time.Second, "300 deliveries before the kill", func() bool { return rec.delivered() >= 300 })
	before, err := policyStates(cfgs[other].httpAddr)
	if err != nil || len(before["flow"].Drainers) != 1 {
		t.Fatalf("drainers of flow before the kill: %v (%v)", before["flow"].Drainers, err)
	}
	victim := before["flow"].Drainers[0]
	killedAt := time.Now()
	shs[drainer].kill()
	atKill := rec.delivered()
	var takeover, flagged time.Duration
	waitFor(t, 20*time.Second, "the other shaper to drain flow", func() bool {
		ps, err := policyStates(cfgs[other].httpAddr)
		if _, ok := ps["flow"].DrainersUnrenewed[victim]; ok && flagged == 0 {
			flagged = time.Since(killedAt)
		}
		takeover = time.Since(killedAt)
		return err == nil && ps["flow"].Draining
	})
	// Until its lease ends, the lost drainer is still listed, marked as
	// no longer renewing.
	if flagged == 0 {
		t.Errorf("the killed drainer %s was never marked as missing its renewals (drainers_unrenewed_ms) before the take-over", victim)
	} else {
		t.Logf("the killed drainer %s was marked as missing its renewals %v after the kill", victim, flagged.Round(time.Millisecond))
	}
	rep := rec.waitAll(ids, 60*time.Second)
	resumed := rec.firstAfter(killedAt.Add(500 * time.Millisecond)).Sub(killedAt)
	dups := rec.duplicatesByKey()
	most := 0
	for _, n := range dups {
		most = max(most, n)
	}
	t.Logf("kill -9 of the draining shaper with %d of %d jobs delivered: the other took the lease over %v after the kill and delivered again %v after it (lease TTL 6 s, renewed every 2 s)",
		atKill, len(ids), takeover.Round(time.Millisecond), resumed.Round(time.Millisecond))
	t.Logf("%d of %d jobs delivered; %d duplicate deliveries, at most %d on one key: %v", len(ids)-len(rep.missing), len(ids), rep.duplicates, most, sortedCounts(dups))
	if len(rep.missing) > 0 {
		t.Fatalf("%d of %d jobs answered 202 never delivered, e.g. %v", len(rep.missing), len(ids), firstFew(rep.missing, 5))
	}
	if most > 1 {
		t.Errorf("a key had %d duplicate deliveries after one crash, want at most 1 (the job in flight)", most)
	}
	if takeover > 6*time.Second+time.Second {
		t.Errorf("take-over %v after the kill, want at most the lease TTL (6 s) and a look", takeover)
	}
}

// stepDownTo asks stream's leader to step down in favour of server name.
func stepDownTo(t *testing.T, js jetstream.JetStream, stream, name string) {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": name}})
	deadline := time.Now().Add(20 * time.Second)
	for streamLeader(t, js, stream) != name {
		if time.Now().After(deadline) {
			t.Fatalf("%s still not led by %s after 20 s", stream, name)
		}
		m, err := js.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, req, 5*time.Second)
		if err != nil {
			t.Logf("step down %s: %v", stream, err)
		} else if !strings.Contains(string(m.Data), `"success":true`) {
			t.Logf("step down %s: %s", stream, m.Data)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// newLeaderAt returns when stream first answered with a leader other than
// old, looking every 20 ms for at most d.
func newLeaderAt(js jetstream.JetStream, stream, old string, d time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		s, err := js.Stream(ctx, stream)
		cancel()
		if err == nil {
			if c := s.CachedInfo().Cluster; c != nil && c.Leader != "" && c.Leader != old {
				return time.Now(), true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Time{}, false
}

// sortedCounts formats counts by key, in key order, skipping zeros.
func sortedCounts(m map[string]int) string {
	var keys []string
	for k, n := range m {
		if n > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s:%d ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

// twoShapers starts a 3-node JetStream cluster and two shapers on it (R3)
// serving policyYAML, and waits until one of them drains policy: it
// returns the cluster, the shapers' configs and processes, and which of
// the two drains.
func twoShapers(t *testing.T, policyYAML, policy string) (*natsCluster, [2]shaperConfig, [2]*proc, int) {
	t.Helper()
	cluster := startCluster(t, 3)
	policyFile := writePolicies(t, policyYAML)
	ports := freePorts(t, 2)
	var (
		cfgs [2]shaperConfig
		shs  [2]*proc
	)
	for i := range cfgs {
		cfgs[i] = shaperConfig{policies: policyFile, httpAddr: fmt.Sprintf("127.0.0.1:%d", ports[i]), natsURL: cluster.urls(), replicas: 3}
		shs[i] = startShaper(t, cfgs[i])
	}
	drainer := -1
	waitFor(t, 15*time.Second, "one shaper to drain "+policy, func() bool {
		for i, c := range cfgs {
			if ps, err := policyStates(c.httpAddr); err == nil && ps[policy].Draining {
				drainer = i
				return true
			}
		}
		return false
	})
	return cluster, cfgs, shs, drainer
}
