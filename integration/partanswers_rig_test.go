package integration

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/client"
)

// partRig is a policy in partitions drained by several shapers on one
// JetStream server, delivering to a webhook that records when each job
// arrives: what TestPartitionedAnswers asks and checks.
type partRig struct {
	t      *testing.T
	w      *webhook
	cfgs   []shaperConfig
	procs  []*proc
	subs   []*submitter
	keys   [][]string // by partition
	policy string
	parts  int

	mu   sync.Mutex
	jobs map[string][]string // key → every job accepted, in submission order
}

// accepted records that job id of key was answered 202.
func (r *partRig) accepted(key, id string) {
	r.mu.Lock()
	r.jobs[key] = append(r.jobs[key], id)
	r.mu.Unlock()
}

// checkOrder waits until every job accepted reached the webhook and checks
// that each key's came in the order they were submitted.
func (r *partRig) checkOrder() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ids := range r.jobs {
		n += len(ids)
	}
	waitFor(r.t, 90*time.Second, fmt.Sprintf("all %d jobs accepted at the webhook", n), func() bool {
		for _, ids := range r.jobs {
			for _, id := range ids {
				if _, ok := r.w.arrived(id); !ok {
					return false
				}
			}
		}
		return true
	})
	for key, ids := range r.jobs {
		var last time.Time
		for i, id := range ids {
			at, _ := r.w.arrived(id)
			if at.Before(last) {
				r.t.Errorf("key %s: its job %d (of %d) arrived %v before the one submitted before it", key, i, len(ids), last.Sub(at))
			}
			last = at
		}
	}
	r.t.Logf("%d jobs accepted, each key's delivered in order", n)
}

// partRigPolicy is the rig's policy: 1/s per key (a slot of 1 s), a total
// of 8/s, so each of 4 partitions paces its keys at 2/s (500 ms apart):
// with three or four keys waiting in a partition the cap binds (a round of
// 1.5–2 s), with one or two the key's own outflow does.
const (
	partRigParts  = 4
	partRigSlot   = time.Second
	partRigLease  = 1500 * time.Millisecond
	partRigPolicy = "policies:\n  - {name: pa, outflow: 1/s, total: 8/s, queue: 6, partitions: 4, deliver: {webhook: %q}}\n"
)

// startPartRig starts a JetStream server, the webhook and shapers shapers
// (of cap of them: the others' ports are kept for startShaperAt), and
// picks keysPer keys in each partition.
func startPartRig(t *testing.T, shapers, capacity, keysPer int) *partRig {
	t.Helper()
	natsURL := startNATS(t)
	r := &partRig{t: t, w: startWebhook(t), policy: "pa", parts: partRigParts, jobs: map[string][]string{}}
	policyFile := writePolicies(t, fmt.Sprintf(partRigPolicy, r.w.url))
	ports := freePorts(t, capacity)
	for i := range capacity {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[i])
		r.cfgs = append(r.cfgs, shaperConfig{policies: policyFile, httpAddr: addr, natsURL: natsURL, replicas: 1, leaseTTL: partRigLease})
		r.subs = append(r.subs, newSubmitter(addr, 10*time.Second))
	}
	r.procs = make([]*proc, capacity)
	for i := range shapers {
		r.procs[i] = startShaper(t, r.cfgs[i])
	}
	r.keys = make([][]string, r.parts)
	for k := 0; ; k++ {
		name := fmt.Sprintf("key%d", k)
		tok, err := queue.EncodeKey(name)
		if err != nil {
			t.Fatal(err)
		}
		p := drain.PartitionOf(tok, r.parts)
		if len(r.keys[p]) < keysPer {
			r.keys[p] = append(r.keys[p], name)
		}
		if slices.IndexFunc(r.keys, func(ks []string) bool { return len(ks) < keysPer }) < 0 {
			break
		}
	}
	return r
}

// startNATS starts one nats-server with JetStream (no cluster) and
// returns its URL once it accepts streams.
func startNATS(t *testing.T) string {
	t.Helper()
	port := freePorts(t, 1)[0]
	node := &natsNode{name: "n1", port: port}
	node.p = startProc(t, "nats-server", bins.natsServer, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-n", "n1", "-js", "-sd", t.TempDir())
	c := &natsCluster{nodes: []*natsNode{node}}
	c.waitJetStream(t, 1, 30*time.Second)
	return c.urls()
}

// live returns the shapers running.
func (r *partRig) live() []int {
	var on []int
	for i, p := range r.procs {
		if p != nil && !p.exited() {
			on = append(on, i)
		}
	}
	return on
}

// held returns the partitions shaper i drains, nil when it does not answer.
func (r *partRig) held(i int) []int {
	ps, err := policyStates(r.cfgs[i].httpAddr)
	if err != nil {
		return nil
	}
	return ps[r.policy].DrainingPartitions
}

// holders returns, by partition, the shaper draining it (-1: none).
func (r *partRig) holders() []int {
	out := slices.Repeat([]int{-1}, r.parts)
	for _, i := range r.live() {
		for _, p := range r.held(i) {
			out[p] = i
		}
	}
	return out
}

// waitShared waits until the live shapers drain every partition between
// them, each ⌊n/m⌋ or ⌈n/m⌉ of them, unchanged for a lease TTL (a join or
// a leave moves partitions as each shaper sees the membership change: a
// balanced share may still move on), logs who drains what, and returns the
// holders and when they were first seen.
func (r *partRig) waitShared() ([]int, time.Time) {
	r.t.Helper()
	live := r.live()
	var (
		holders, last []int
		since         time.Time
	)
	waitFor(r.t, 30*time.Second, fmt.Sprintf("the %d partitions shared out over shapers %v", r.parts, live), func() bool {
		holders = r.holders()
		if !slices.Equal(holders, last) {
			last, since = holders, time.Now()
			return false
		}
		count := map[int]int{}
		for _, h := range holders {
			if h < 0 {
				return false
			}
			count[h]++
		}
		m := min(len(live), r.parts)
		for _, c := range count {
			if c < r.parts/m || c > (r.parts+m-1)/m {
				return false
			}
		}
		return len(count) == m && time.Since(since) >= partRigLease
	})
	r.t.Logf("partitions held by shapers %v (by partition)", holders)
	return holders, since
}

// startShaperAt starts shaper i (again).
func (r *partRig) startShaperAt(i int) { r.procs[i] = startShaper(r.t, r.cfgs[i]) }

// terminate stops shaper i with SIGTERM and waits for it to exit.
func (r *partRig) terminate(i int) {
	r.t.Helper()
	if err := syscall.Kill(r.procs[i].pid(), syscall.SIGTERM); err != nil {
		r.t.Fatal(err)
	}
	if _, ok := r.procs[i].wait(30 * time.Second); !ok {
		r.t.Fatalf("shaper %d still running 30 s after SIGTERM", i)
	}
}

// answerOf is one answer a producer got, and what it is checked against.
type answerOf struct {
	shaper  int  // the shaper asked
	holding bool // it drained the key's partition when asked
	key     string
	part    int // the key's partition
	kind    string
	what    string
	id      string    // the job accepted (202), to find its arrival
	want    time.Time // when the answer said the job starts, or the key has room
	got     time.Time // when it did
}

func (a answerOf) off() time.Duration { return a.got.Sub(a.want) }

// submit submits one job of key through shaper i and returns its answer
// when accepted (an eta_ms), false when the key is full.
func (r *partRig) submit(i int, key string, holders []int) (answerOf, bool) {
	r.t.Helper()
	asked := time.Now()
	res, err := r.subs[i].api.Submit(context.Background(), r.policy, key, []byte("x"))
	if err == nil && res.Outcome == client.OutcomeRejected {
		return answerOf{}, false
	}
	if err != nil || res.Outcome != client.OutcomeAccepted {
		r.t.Fatalf("submit %s through shaper %d: %+v, %v", key, i, res, err)
	}
	r.accepted(key, res.ID)
	return answerOf{shaper: i, holding: r.holds(i, key, holders), key: key, part: r.partOf(key), kind: "eta", id: res.ID, want: asked.Add(res.ETA),
		what: fmt.Sprintf("%s eta %v", key, res.ETA)}, true
}

func (r *partRig) partOf(key string) int {
	for p, ks := range r.keys {
		if slices.Contains(ks, key) {
			return p
		}
	}
	return -1
}

func (r *partRig) holds(i int, key string, holders []int) bool { return holders[r.partOf(key)] == i }

// wave submits n jobs to keys only (indexes into each partition's keys),
// key after key, each job through the next live shaper in turn, and
// returns their answers.
func (r *partRig) wave(n int, tag string, only ...int) []answerOf {
	r.t.Helper()
	holders := r.holders()
	live := r.live()
	var out []answerOf
	turn := 0
	for j := range n {
		for _, ks := range r.keys {
			for _, k := range only {
				key := ks[k]
				i := live[turn%len(live)]
				turn++
				a, ok := r.submit(i, key, holders)
				if !ok {
					r.t.Fatalf("%s: job %d of %s refused as full", tag, j, key)
				}
				a.kind = tag
				out = append(out, a)
			}
		}
	}
	return out
}

// arrivals waits until every accepted job of answers reached the webhook
// and fills in when.
func (r *partRig) arrivals(answers []answerOf) {
	r.t.Helper()
	waitFor(r.t, 90*time.Second, "every job answered 202 at the webhook", func() bool {
		for _, a := range answers {
			if _, ok := r.w.arrived(a.id); a.id != "" && !ok {
				return false
			}
		}
		return true
	})
	for i := range answers {
		if answers[i].id != "" {
			answers[i].got, _ = r.w.arrived(answers[i].id)
		}
	}
}

// refusal fills key to its limit through shaper i and returns the 429's
// Retry-After (got is filled in by awaitRoom).
func (r *partRig) refusal(i int, key, tag string, holders []int) answerOf {
	r.t.Helper()
	ctx := context.Background()
	for n := 0; ; n++ {
		asked := time.Now()
		res, err := r.subs[i].api.Submit(ctx, r.policy, key, []byte("x"))
		if err == nil && res.Outcome == client.OutcomeRejected {
			return answerOf{shaper: i, holding: r.holds(i, key, holders), key: key, part: r.partOf(key), kind: tag,
				want: asked.Add(res.RetryAfter), what: fmt.Sprintf("%s Retry-After %v", key, res.RetryAfter)}
		}
		if err != nil || res.Outcome != client.OutcomeAccepted || n == 20 {
			r.t.Fatalf("filling %s through shaper %d: %+v, %v", key, i, res, err)
		}
		r.accepted(key, res.ID)
	}
}

// refusals asks each of shapers for a 429 of a key of each partition: a
// key of its own, the n-th shaper the partition's n-th key, so that one
// shaper's acceptance does not end another's wait.
func (r *partRig) refusals(tag string, shapers ...int) []answerOf {
	r.t.Helper()
	holders := r.holders()
	var out []answerOf
	for n, i := range shapers {
		for _, ks := range r.keys {
			out = append(out, r.refusal(i, ks[n], tag, holders))
		}
	}
	return out
}

// awaitRoom starts finding, for each 429 of answers, when the shaper that
// gave it next accepts a job of its key (asked every 50 ms from now on;
// refusals change nothing), all at once; wait waits until each is found.
func (r *partRig) awaitRoom(answers []answerOf) (wait func()) {
	var wg sync.WaitGroup
	for n := range answers {
		a := &answers[n]
		wg.Go(func() {
			ctx := context.Background()
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				res, err := r.subs[a.shaper].api.Submit(ctx, r.policy, a.key, []byte("x"))
				if err == nil && res.Outcome == client.OutcomeAccepted {
					a.got = time.Now()
					r.accepted(a.key, res.ID)
					return
				}
				if err != nil && !strings.Contains(err.Error(), "full") {
					r.t.Errorf("submit %s through shaper %d while full: %v", a.key, a.shaper, err)
					return
				}
			}
			r.t.Errorf("%s: shaper %d never accepted a job again", a.key, a.shaper)
		})
	}
	return wg.Wait
}

// spread sums up answers' offsets (arrival − promise) for the log.
func spread(answers []answerOf) string {
	if len(answers) == 0 {
		return "none"
	}
	offs := make([]time.Duration, len(answers))
	for i, a := range answers {
		offs[i] = a.off()
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	q := func(f float64) time.Duration { return offs[int(f*float64(len(offs)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("n=%d min %v p10 %v median %v p90 %v max %v", len(offs), q(0), q(0.1), q(0.5), q(0.9), q(1))
}

// report logs every answer and the spread of each kind, by whether the
// shaper asked drained the key's partition, and returns the answers split
// so.
func report(t *testing.T, answers []answerOf) (holding, passive []answerOf) {
	t.Helper()
	if len(answers) == 0 {
		return nil, nil
	}
	for _, a := range answers {
		t.Logf("%-10s shaper %d (holding %-5v) %-40s arrived %+v after the answer", a.kind, a.shaper, a.holding, a.what, a.off().Round(time.Millisecond))
		if a.holding {
			holding = append(holding, a)
		} else {
			passive = append(passive, a)
		}
	}
	t.Logf("SPREAD %s: asked of the partition's drainer: %s", answers[0].kind, spread(holding))
	t.Logf("SPREAD %s: asked of another shaper: %s", answers[0].kind, spread(passive))
	t.Logf("SPREAD %s: all: %s", answers[0].kind, spread(answers))
	return holding, passive
}

// within checks that every answer came true within tolerance.
func within(t *testing.T, answers []answerOf, tolerance time.Duration) {
	t.Helper()
	between(t, answers, -tolerance, tolerance)
}

// between checks that every answer came true between early and late
// after the time it said.
func between(t *testing.T, answers []answerOf, early, late time.Duration) {
	t.Helper()
	for _, a := range answers {
		if off := a.off(); off > late || off < early {
			t.Errorf("%s, from shaper %d (holding its partition: %v): came true %v after the answer, want within [%v, %v]",
				a.what, a.shaper, a.holding, off.Round(time.Millisecond), early, late)
		}
	}
}
