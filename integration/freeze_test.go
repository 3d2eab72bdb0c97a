package integration

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// freezePolicy drains each key at 10 jobs a second, confirmed by the
// consumer.
const freezeRate = 10

var freezePolicy = confirmedPolicy("frozen", fmt.Sprintf("%d/s", freezeRate), 1000)

// TestFreezeDrainingShaper runs two shapers on a 3-node JetStream cluster
// (R3), freezes the one draining a backlog over 20 keys with SIGSTOP for
// 9 s — past its drain lease (6 s) — and wakes it with SIGCONT: a long GC
// pause, a stalled VM. The other shaper takes the drain over once the
// frozen one's lease has expired. The woken shaper must deliver nothing on
// the lease it no longer holds: its deliveries are fenced by the end of
// its lease on its own monotonic clock. So every job answered 202 is
// delivered, a key gets at most one duplicate (the job in flight at the
// freeze, delivered again by the new holder), and no key gets more than
// ⌈T·rate⌉+1 deliveries in any window of T (at the consumer: T plus the
// arrivals' jitter).
func TestFreezeDrainingShaper(t *testing.T) {
	needBinaries(t)
	cluster, cfgs, shs, drainer := twoShapers(t, freezePolicy, "frozen")
	log := logDeliveries(t, cluster.urls(), "shaper.out.frozen.>")
	other := 1 - drainer
	a, b := shs[drainer], shs[other]

	const keys, perKey = 20, 150 // 15 s of deliveries per key
	ids, _ := submitAll(t, newSubmitter(cfgs[drainer].httpAddr, 15*time.Second), "frozen", keys, perKey)
	waitFor(t, 30*time.Second, "2 s of deliveries before the freeze", func() bool { return log.distinct() >= 2*keys*freezeRate })

	if err := syscall.Kill(a.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	defer syscall.Kill(a.pid(), syscall.SIGCONT) // the cleanup's SIGKILL works either way
	atFreeze := log.distinct()
	var takeover time.Duration
	for time.Since(frozenAt) < 9*time.Second {
		if takeover == 0 {
			if ps, err := policyStates(cfgs[other].httpAddr); err == nil && ps["frozen"].Draining {
				takeover = time.Since(frozenAt)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(a.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wokeAt := time.Now()
	if takeover == 0 {
		t.Fatalf("%s did not take the drain over during the 9 s freeze of %s (lease TTL 6 s)", b.name, a.name)
	}
	var gaveUp time.Duration
	waitFor(t, 10*time.Second, a.name+" to say it no longer drains after waking", func() bool {
		ps, err := policyStates(cfgs[drainer].httpAddr)
		gaveUp = time.Since(wokeAt)
		return err == nil && !ps["frozen"].Draining
	})
	if ps, err := policyStates(cfgs[other].httpAddr); err != nil || !ps["frozen"].Draining {
		t.Errorf("%s does not drain after %s woke: %v", b.name, a.name, err)
	}

	waitFor(t, 60*time.Second, "every job to be delivered", func() bool { return len(log.missing(ids)) == 0 })
	waitFor(t, 10*time.Second, b.name+" to have nothing queued or in flight", func() bool {
		ps, err := policyStates(cfgs[other].httpAddr)
		return err == nil && ps["frozen"].Queued == 0 && ps["frozen"].InFlight == 0
	})
	if err := log.err(); err != nil {
		t.Fatal(err)
	}

	// Who delivered what: the frozen shaper's requests come from the reply
	// subjects of its connections, all of which delivered before the
	// freeze; the other shaper delivered nothing before.
	all := log.all()
	fromA := map[string]bool{}
	for _, d := range all {
		if d.at.Before(frozenAt) {
			fromA[d.from] = true
		}
	}
	var inFreeze, afterWake []delivery
	for _, d := range all {
		switch {
		case !fromA[d.from] || d.at.Before(frozenAt):
		case d.at.Before(wokeAt):
			inFreeze = append(inFreeze, d)
		default:
			afterWake = append(afterWake, d)
		}
	}
	resumed := time.Duration(0)
	for _, d := range all {
		if !fromA[d.from] {
			resumed = d.at.Sub(frozenAt)
			break
		}
	}
	dups := map[string]int{}
	times := map[string][]time.Time{}
	count := map[string]int{}
	for _, d := range all {
		count[d.id]++
		if count[d.id] > 1 {
			dups[d.key]++
		}
		times[d.key] = append(times[d.key], d.at)
	}
	most, worst, worstKey, perRun := 0, 0, "", ""
	for key, ts := range times {
		most = max(most, dups[key])
		if n := maxIn(ts, time.Second); n > worst {
			worst, worstKey = n, key
		}
		span := ts[len(ts)-1].Sub(ts[0])
		if limit := int(math.Ceil(span.Seconds()*freezeRate)) + 1; len(ts) > limit {
			perRun += fmt.Sprintf("%s: %d deliveries in %v (limit %d); ", key, len(ts), span.Round(time.Millisecond), limit)
		}
	}
	t.Logf("froze %s (drained %d of %d jobs) for %v: %s drained from %v after the freeze (first delivery %v after), %s gave up its drain %v after waking",
		a.name, atFreeze, len(ids), wokeAt.Sub(frozenAt).Round(time.Millisecond), b.name, takeover.Round(time.Millisecond),
		resumed.Round(time.Millisecond), a.name, gaveUp.Round(time.Millisecond))
	t.Logf("%d deliveries of %d jobs; duplicates by key: %s (at most %d); %s's deliveries arriving during the freeze: %d, after waking: %d; most deliveries of a key in a second: %d (%s)",
		len(all), len(ids), sortedCounts(dups), most, a.name, len(inFreeze), len(afterWake), worst, worstKey)
	t.Logf("%s logged: %s", a.name, strings.Join(grepLines(a.out.String(), "draining policy"), "; "))

	if missing := log.missing(ids); len(missing) > 0 {
		t.Errorf("%d of %d jobs answered 202 never delivered, e.g. %v", len(missing), len(ids), firstFew(missing, 5))
	}
	if most > 1 {
		t.Errorf("a key got %d duplicate deliveries across the freeze, want at most 1 (the job in flight): %s", most, sortedCounts(dups))
	}
	if len(afterWake) > 0 {
		t.Errorf("%s delivered %d jobs after waking on a lease it no longer held, e.g. %s of %s %v after waking",
			a.name, len(afterWake), afterWake[0].id, afterWake[0].key, afterWake[0].at.Sub(wokeAt).Round(time.Millisecond))
	}
	// The consumer sees arrivals, not starts: a delivery held up on the way
	// (a busy machine, a cluster hop) arrives closer to the next one than
	// their slots were. Arrivals in a window of T are starts in a window of
	// T plus that jitter, allowed up to arrivalJitter.
	if limit := int(math.Ceil((time.Second+arrivalJitter).Seconds()*freezeRate)) + 1; worst > limit {
		t.Errorf("key %s got %d deliveries within one second, want at most ⌈(1 s + %v) × %d/s⌉+1 = %d", worstKey, worst, arrivalJitter, freezeRate, limit)
	}
	if perRun != "" {
		t.Errorf("keys over ⌈T·rate⌉+1 over their whole run: %s", perRun)
	}
}

// arrivalJitter is how much later than its neighbours a delivery may reach
// a consumer on a busy machine, which a window counted at the consumer
// allows for.
const arrivalJitter = 100 * time.Millisecond

// maxIn returns the most of ts (in order) within any window of length w.
func maxIn(ts []time.Time, w time.Duration) int {
	best, i := 0, 0
	for j := range ts {
		for ts[j].Sub(ts[i]) >= w {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// delivery is one delivery as the consumer received it.
type delivery struct {
	id, key string
	from    string // the reply subject's prefix: the delivering connection
	at      time.Time
}

// deliveryLog is a consumer that confirms every delivery of a policy and
// records each, with the connection it came from: a request's reply
// subject is _INBOX.<the connection's prefix>.<token>.
type deliveryLog struct {
	mu    sync.Mutex
	list  []delivery
	ids   map[string]bool
	async error
}

func logDeliveries(t *testing.T, url, subject string) *deliveryLog {
	t.Helper()
	l := &deliveryLog{ids: map[string]bool{}}
	nc, err := nats.Connect(url,
		nats.Name("integration delivery log"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			l.mu.Lock()
			if l.async == nil {
				l.async = err
			}
			l.mu.Unlock()
		}),
	)
	if err != nil {
		t.Fatalf("delivery log: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		d := delivery{id: m.Header.Get("Shaper-Job-Id"), key: m.Header.Get("Shaper-Key"), at: time.Now()}
		if i := strings.LastIndexByte(m.Reply, '.'); i > 0 {
			d.from = m.Reply[:i]
		}
		l.mu.Lock()
		l.list = append(l.list, d)
		l.ids[d.id] = true
		l.mu.Unlock()
		if m.Reply != "" {
			_ = m.Respond(nil)
		}
	}); err != nil {
		t.Fatalf("delivery log: subscribe %s: %v", subject, err)
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		t.Fatalf("delivery log: flush: %v", err)
	}
	return l
}

// distinct returns how many distinct jobs were delivered.
func (l *deliveryLog) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids)
}

// missing returns the ids in want never delivered.
func (l *deliveryLog) missing(want []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, id := range want {
		if !l.ids[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// all returns every delivery, in arrival order.
func (l *deliveryLog) all() []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}

// err returns the first asynchronous error (a slow consumer drops
// messages, which would make the counts meaningless).
func (l *deliveryLog) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.async != nil {
		return fmt.Errorf("delivery log: %w (deliveries were dropped by the client)", l.async)
	}
	return nil
}
