package integration

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// partitionedPolicy drains 1,000 keys at 1 job per 2 s each in 8 partitions.
const partitionedPolicy = `policies:
  - name: wide
    outflow: 30/m
    queue: 30
    partitions: 8
`

// TestPartitionedDrain runs three shapers on a 3-node JetStream cluster
// draining one policy in 8 partitions over 1,000 keys: each shaper drains
// some partitions; one is killed with SIGKILL, and its partitions are
// drained again by the others (the whole gap from the kill to each
// partition's next delivery is reported: lease TTL 1.5 s, goal 2 s);
// then it is started again and takes its share back without a pause
// longer than one slot. Every job answered 202 is delivered, at most the
// job in flight is delivered twice, and no key exceeds ⌈T·rate⌉+2 in any
// window T across the hand-overs.
func TestPartitionedDrain(t *testing.T) {
	needBinaries(t)
	const (
		shapers, parts = 3, 8
		keys, perKey   = 1000, 12
		slot           = 2 * time.Second // 30/m
		ttl            = 1500 * time.Millisecond
	)
	cluster := startCluster(t, 3)
	policyFile := writePolicies(t, partitionedPolicy)
	ports := freePorts(t, shapers)
	cfgs := make([]shaperConfig, shapers)
	procs := make([]*proc, shapers)
	for i := range cfgs {
		cfgs[i] = shaperConfig{policies: policyFile, httpAddr: fmt.Sprintf("127.0.0.1:%d", ports[i]), natsURL: cluster.urls(), replicas: 3, leaseTTL: ttl}
		procs[i] = startShaper(t, cfgs[i])
	}
	held := func(i int) []int {
		ps, err := policyStates(cfgs[i].httpAddr)
		if err != nil {
			return nil
		}
		return ps["wide"].DrainingPartitions
	}
	balanced := func(live []int) func() bool {
		return func() bool {
			var all []int
			for _, i := range live {
				h := held(i)
				if len(h) < parts/len(live) {
					return false
				}
				all = append(all, h...)
			}
			slices.Sort(all)
			return len(slices.Compact(all)) == parts && len(all) == parts
		}
	}
	waitFor(t, 20*time.Second, "the 8 partitions shared out over 3 shapers", balanced([]int{0, 1, 2}))
	for i := range cfgs {
		t.Logf("shaper %d drains partitions %v", i, held(i))
	}
	ps, err := policyStates(cfgs[1].httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps["wide"].Drainers) != parts || ps["wide"].Partitions != parts {
		t.Errorf("partitions %d, drainers %q, want %d, one drainer each", ps["wide"].Partitions, ps["wide"].Drainers, parts)
	}

	time.Sleep(1100 * time.Millisecond) // Drainers answers from a read at most 1 s old
	ps, err = policyStates(cfgs[1].httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfgs {
		want := cfgs[i].httpAddr
		for _, p := range held(i) {
			if got := ps["wide"].Drainers[p]; !strings.HasSuffix(got, want) {
				t.Errorf("drainers[%d] = %q, want shaper %d (%s), which drains it", p, got, i, want)
			}
		}
	}

	rec := record(t, cluster.urls(), "shaper.out.wide.>")
	submitted := submitInBackground(t, newSubmitter(cfgs[1].httpAddr, 15*time.Second), "wide", keys, perKey)
	partOf := map[string]int{}
	for k := range keys {
		key := fmt.Sprintf("k%02d", k)
		tok, err := queue.EncodeKey(key)
		if err != nil {
			t.Fatal(err)
		}
		partOf[key] = drain.PartitionOf(tok, parts)
	}

	victim := 0
	orphans := held(victim)
	waitFor(t, 30*time.Second, "2,000 deliveries before the kill", func() bool { return rec.delivered() >= 2000 })
	killedAt := time.Now()
	procs[victim].kill()
	t.Logf("killed shaper %d with %d jobs delivered", victim, rec.delivered())
	waitFor(t, 20*time.Second, "the killed shaper's partitions drained by the others", balanced([]int{1, 2}))
	covered := time.Since(killedAt)
	time.Sleep(time.Second)
	gaps := rec.partitionResumed(partOf, orphans, killedAt.Add(100*time.Millisecond))
	worst := time.Duration(0)
	for _, g := range gaps {
		worst = max(worst, g+100*time.Millisecond)
	}
	t.Logf("kill -9 of shaper %d (partitions %v, lease TTL %v): the others held them all %v after the kill; each partition delivered again (after the kill + 100 ms) after %v",
		victim, orphans, ttl, covered.Round(time.Millisecond), roundAll(gaps))
	if worst > ttl+time.Second+time.Second/2 {
		t.Errorf("a partition delivered again %v after the kill, want within the lease TTL (%v) and 1 s of it (goal 2 s in all)", worst, ttl)
	}

	restartAt := time.Now()
	t.Logf("restarting shaper %d with %d jobs delivered", victim, rec.delivered())
	stopWatch := watchHolders(t, cfgs, restartAt)
	procs[victim] = startShaper(t, cfgs[victim])
	waitFor(t, 20*time.Second, "the restarted shaper to take its share back", balanced([]int{0, 1, 2}))
	t.Logf("restarted shaper %d drains %v again %v after its start", victim, held(victim), time.Since(restartAt).Round(time.Millisecond))
	time.Sleep(3 * slot) // every key delivers a few times after the hand-over
	stopWatch()
	pause, part, at := rec.longestPartitionGap(partOf, restartAt, time.Now())
	key, gap := rec.longestKeyGap(restartAt, time.Now())
	t.Logf("while partitions were handed back: longest pause of a partition's deliveries %v (partition %d, from %v after the restart began); longest gap between two deliveries of one key %v (%s), a slot being %v",
		pause.Round(time.Millisecond), part, at.Sub(restartAt).Round(time.Millisecond), gap.Round(time.Millisecond), key, slot)
	// A key keeps its pace across a hand-over: its next job comes one slot
	// after its last, and the hand-over may add at most one more. (A
	// partition's keys that fall due together leave it idle between their
	// slots: its longest pause is only reported.)
	if gap > 2*slot {
		t.Errorf("rebalancing left key %s %v between two deliveries, want at most one slot (%v) more than its pace", key, gap, slot)
	}

	ids := submitted()
	rep := rec.waitAll(ids, 120*time.Second)
	dups := rec.duplicatesByKey()
	most := 0
	for _, n := range dups {
		most = max(most, n)
	}
	t.Logf("%d of %d jobs delivered; %d duplicate deliveries, at most %d on one key", len(ids)-len(rep.missing), len(ids), rep.duplicates, most)
	if len(rep.missing) > 0 {
		t.Fatalf("%d of %d jobs answered 202 never delivered, e.g. %v", len(rep.missing), len(ids), firstFew(rep.missing, 5))
	}
	if most > 1 {
		t.Errorf("a key had %d duplicate deliveries after one crash, want at most 1 (the job in flight)", most)
	}
	for _, w := range []time.Duration{slot, 5 * slot} {
		bound := int(math.Ceil(w.Seconds()/slot.Seconds())) + 2
		key, n := rec.busiestKeyWindow(w, false)
		all, n2 := rec.busiestKeyWindow(w, true)
		t.Logf("busiest %v window of any key: %d jobs (%s), bound ⌈T·rate⌉+2 = %d; %d deliveries counting the duplicates of the crash (%s)", w, n, key, bound, n2, all)
		if n > bound {
			t.Errorf("key %s had %d jobs delivered within %v, want at most %d", key, n, w, bound)
		}
	}
}

func roundAll(ds map[int]time.Duration) string {
	var parts []int
	for p := range ds {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	out := ""
	for _, p := range parts {
		out += fmt.Sprintf("p%d %v ", p, ds[p].Round(time.Millisecond))
	}
	return out
}

// partitionResumed returns, for each partition of parts, how long after
// from its keys' first delivery came (by partOf, key → partition).
func (r *recorder) partitionResumed(partOf map[string]int, parts []int, from time.Time) map[int]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int]time.Duration{}
	for key, ats := range r.keyAt {
		p := partOf[key]
		if !slices.Contains(parts, p) {
			continue
		}
		for _, at := range ats {
			if at.After(from) {
				if d, ok := out[p]; !ok || at.Sub(from) < d {
					out[p] = at.Sub(from)
				}
				break
			}
		}
	}
	return out
}

// longestPartitionGap returns the longest time between two deliveries of
// one partition's keys within [from, to].
func (r *recorder) longestPartitionGap(partOf map[string]int, from, to time.Time) (gap time.Duration, part int, at time.Time) {
	r.mu.Lock()
	byPart := map[int][]time.Time{}
	for key, ats := range r.keyAt {
		for _, at := range ats {
			if !at.Before(from) && !at.After(to) {
				byPart[partOf[key]] = append(byPart[partOf[key]], at)
			}
		}
	}
	r.mu.Unlock()
	for p, ats := range byPart {
		slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(ats); i++ {
			if d := ats[i].Sub(ats[i-1]); d > gap {
				gap, part, at = d, p, ats[i-1]
			}
		}
	}
	return gap, part, at
}

// longestKeyGap returns the key with the longest time between two of its
// deliveries within [from, to], and that time.
func (r *recorder) longestKeyGap(from, to time.Time) (key string, gap time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, ats := range r.keyAt {
		var last time.Time
		for _, at := range ats {
			if at.Before(from) || at.After(to) {
				continue
			}
			if !last.IsZero() && at.Sub(last) > gap {
				key, gap = k, at.Sub(last)
			}
			last = at
		}
	}
	return key, gap
}

// watchHolders logs every change of the partitions each shaper drains,
// polled every 20 ms, until the returned function is called.
func watchHolders(t *testing.T, cfgs []shaperConfig, since time.Time) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() {
			last := "?"
			for {
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
				now := "down"
				if ps, err := policyStates(c.httpAddr); err == nil {
					now = fmt.Sprint(ps["wide"].DrainingPartitions)
				}
				if now != last {
					t.Logf("%v: shaper %d drains %s", time.Since(since).Round(time.Millisecond), i, now)
					last = now
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// busiestKeyWindow returns the key with the most deliveries within one
// window of length w, and how many: of distinct jobs (a duplicate delivery
// counts only with dups).
func (r *recorder) busiestKeyWindow(w time.Duration, dups bool) (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	times := r.keyAt
	if !dups {
		times = r.firstAt
	}
	best, bestKey := 0, ""
	for key, ats := range times {
		ats = slices.Clone(ats)
		slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
		j := 0
		for i := range ats {
			for ats[i].Sub(ats[j]) >= w {
				j++
			}
			if i-j+1 > best {
				best, bestKey = i-j+1, key
			}
		}
	}
	return bestKey, best
}

// submitInBackground submits perKey jobs to each of keys keys (k00, k01…)
// from 16 goroutines, key after key, round after round, and returns a
// function that waits for the end and returns the ids answered 202
// (failing the test on any other answer).
func submitInBackground(t *testing.T, s *submitter, policy string, keys, perKey int) func() []string {
	var (
		mu   sync.Mutex
		ids  []string
		errs []string
		wg   sync.WaitGroup
	)
	const workers = 16
	for w := range workers {
		wg.Go(func() {
			ctx := t.Context()
			for j := range perKey {
				for k := w; k < keys; k += workers {
					key := fmt.Sprintf("k%02d", k)
					a := s.submit(ctx, policy, key, fmt.Sprintf("job %d of %s", j, key))
					mu.Lock()
					if a.code == 202 {
						ids = append(ids, a.id)
					} else {
						errs = append(errs, fmt.Sprintf("%s: %d %v", key, a.code, a.err))
					}
					mu.Unlock()
				}
			}
		})
	}
	return func() []string {
		t.Helper()
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d submissions not answered 202, e.g. %v", len(errs), firstFew(errs, 3))
		}
		return ids
	}
}
