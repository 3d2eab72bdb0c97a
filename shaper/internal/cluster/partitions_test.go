package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
)

func TestAssignBalances(t *testing.T) {
	members := []string{"a", "b", "c"}
	for _, balanced := range []bool{false, true} {
		for _, n := range []int{1, 2, 3, 8, 100} {
			count := map[string]int{}
			for i := range n {
				owners := 0
				for _, m := range members {
					if cluster.Assign("orders", n, members, m, balanced)[i] {
						count[m]++
						owners++
					}
				}
				if owners != 1 {
					t.Fatalf("balanced %v, n=%d: partition %d has %d owners, want 1", balanced, n, i, owners)
				}
			}
			for _, m := range members {
				if c := count[m]; c < n/3 || c > (n+2)/3 {
					t.Errorf("balanced %v, n=%d: %s drains %d partitions, want ⌊n/3⌋ or ⌈n/3⌉", balanced, n, m, c)
				}
			}
		}
		// A member not among those read yet counts as one of them.
		if mine := cluster.Assign("orders", 8, nil, "x", balanced); slices.Contains(mine, false) {
			t.Errorf("balanced %v: a lone member is given %v, want every partition", balanced, mine)
		}
	}
}

// A member joining or leaving moves few partitions when the members share
// them out the balanced way: over 40 policies, a third member joining two
// (or one of three leaving) moves at most ⌈n/3⌉+1 of n partitions on
// average, where the rotation moves about two thirds of them.
func TestAssignMovesFew(t *testing.T) {
	owners := func(policy string, n int, members []string, balanced bool) []string {
		out := make([]string, n)
		for _, m := range members {
			for i, mine := range cluster.Assign(policy, n, members, m, balanced) {
				if mine {
					out[i] = m
				}
			}
		}
		return out
	}
	two, three := []string{"shaper-a", "shaper-b"}, []string{"shaper-a", "shaper-b", "shaper-c"}
	for _, n := range []int{4, 8, 16, 64} {
		moved := map[bool]int{}
		const policies = 40
		for p := range policies {
			policy := fmt.Sprint("policy-", p)
			for _, balanced := range []bool{false, true} {
				before, after := owners(policy, n, two, balanced), owners(policy, n, three, balanced)
				for i := range n {
					if before[i] != after[i] {
						moved[balanced]++
					}
				}
			}
		}
		avg := float64(moved[true]) / policies
		t.Logf("n=%d, a third member joins: %.1f partitions move balanced, %.1f by rotation", n, avg, float64(moved[false])/policies)
		if least := (n + 2) / 3; avg > float64(least+1) {
			t.Errorf("n=%d: %.1f partitions move on average when a third member joins, want at most %d", n, avg, least+1)
		}
		if moved[true] >= moved[false] {
			t.Errorf("n=%d: balanced moves %d partitions, the rotation %d: want fewer", n, moved[true], moved[false])
		}
	}
}

// partitionsHeld is one shaper's side of HoldPartitions: which partitions
// it holds now.
type partitionsHeld struct {
	mu   sync.Mutex
	held map[int]bool
}

func (p *partitionsHeld) set(i int, on bool, _ time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held[i] = on
}

func (p *partitionsHeld) list() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for i, on := range p.held {
		if on {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// holdParts runs HoldPartitions for policy p in n partitions as instance,
// ready at once, until the returned stop is called.
func holdParts(t *testing.T, url, instance string, n int, ttl time.Duration) (*partitionsHeld, func()) {
	t.Helper()
	c, err := cluster.Open(context.Background(), jetStreamOf(t, url), cluster.Config{Instance: instance, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Claim(context.Background(), instance); err != nil {
		t.Fatal(err)
	}
	c.SetReady(func() map[string]int { return map[string]int{"p": n} })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.KeepMembership(ctx) })
	h := &partitionsHeld{held: map[int]bool{}}
	wg.Go(func() { c.HoldPartitions(ctx, "p", n, h.set, func() {}) })
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return h, stop
}

func waitHeld(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Three shapers share 6 partitions, two each; one stops and the other two
// take its partitions; no partition is ever held by two of them.
func TestHoldPartitionsShareAndMove(t *testing.T) {
	s := testenv.NATS(t)
	const ttl = 1500 * time.Millisecond
	var hs []*partitionsHeld
	var stops []func()
	for _, name := range []string{"a", "b", "c"} {
		h, stop := holdParts(t, s.ClientURL(), name, 6, ttl)
		hs, stops = append(hs, h), append(stops, stop)
	}
	shared := func(live ...int) func() bool {
		return func() bool {
			var all []int
			for _, i := range live {
				l := hs[i].list()
				if len(l) != 6/len(live) {
					return false
				}
				all = append(all, l...)
			}
			slices.Sort(all)
			return slices.Equal(all, []int{0, 1, 2, 3, 4, 5})
		}
	}
	waitHeld(t, "6 partitions shared out 2, 2, 2", shared(0, 1, 2))
	stops[2]()
	waitHeld(t, "c's partitions taken by a and b, 3 each", shared(0, 1))
	t.Logf("a holds %v, b holds %v", hs[0].list(), hs[1].list())
}

// A shaper whose policy file says another number of partitions than the
// shapers draining the policy holds none of them until those stop, and
// those go on draining every partition: the newcomer is not counted when
// they share them out.
func TestHoldPartitionsStandsByForAnotherLayout(t *testing.T) {
	for _, first := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d then 4", first), func(t *testing.T) {
			s := testenv.NATS(t)
			const ttl = 1500 * time.Millisecond
			all := func(n int) string {
				var l []int
				for i := range n {
					l = append(l, i)
				}
				return fmt.Sprint(l)
			}
			old, stopOld := holdParts(t, s.ClientURL(), "old", first, ttl)
			waitHeld(t, "the first shaper to hold every partition", func() bool { return fmt.Sprint(old.list()) == all(first) })
			four, _ := holdParts(t, s.ClientURL(), "four", 4, ttl)
			time.Sleep(2 * ttl)
			if l := four.list(); len(l) > 0 {
				t.Fatalf("the four-partition shaper holds %v while another drains the policy in %d", l, first)
			}
			if l := fmt.Sprint(old.list()); l != all(first) {
				t.Fatalf("the first shaper holds %s after the other joined, want all of %s", l, all(first))
			}
			stopOld()
			waitHeld(t, "the four-partition shaper to take all four once the other stopped", func() bool { return len(four.list()) == 4 })
		})
	}
}

// The balanced way is used only once every member knows it: beside a
// shaper of an earlier release (a ready entry that does not say it knows
// it), the members share partitions out the old way, which that shaper
// follows; once it is gone, the balanced way.
func TestMembersBalancedOnlyWhenAllKnowIt(t *testing.T) {
	s := testenv.NATS(t)
	js := jetStreamOf(t, s.ClientURL())
	// Entries live a lease TTL: long enough for the test to see the old
	// shaper's (a shaper ready or gone says so: the members' word).
	c, err := cluster.Open(context.Background(), js, cluster.Config{Instance: "new", LeaseTTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReady(func() map[string]int { return map[string]int{"p": 4} })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.HoldPartitions(ctx, "p", 4, func(int, bool, time.Time) {}, func() {}) })
	wg.Go(func() { c.KeepMembership(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	kv, err := js.KeyValue(context.Background(), "SHAPER_LEASES")
	if err != nil {
		t.Fatal(err)
	}
	members := func(want int) bool {
		ids, balanced, _ := c.Members("p", 4)
		return len(ids) == want && balanced == (want == 1)
	}
	waitHeld(t, "this shaper alone, balanced", func() bool { return members(1) })
	word := func() {
		if err := js.Conn().Publish("_shaper.members.changed", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(context.Background(), "ready.old", []byte(`{"policies":{"p":4}}`)); err != nil {
		t.Fatal(err)
	}
	word()
	waitHeld(t, "an earlier release's shaper beside it, not balanced", func() bool { return members(2) })
	if err := kv.Delete(context.Background(), "ready.old"); err != nil {
		t.Fatal(err)
	}
	word()
	waitHeld(t, "balanced again once it is gone", func() bool { return members(1) })
}

// Two shapers whose files drain the policy in different numbers of
// partitions, starting at the same moment on a store without a layout
// entry (a new cluster, or one whose entries expired in an outage): the
// one whose layout entry was not stored stands by at once, never
// draining beside the other (their partitions split the keys otherwise,
// so a key could be drained twice).
func TestHoldPartitionsLayoutRace(t *testing.T) {
	for _, first := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d and 4", first), func(t *testing.T) { layoutRace(t, first) })
	}
}

func layoutRace(t *testing.T, first int) {
	for run := range 3 {
		s := testenv.NATS(t)
		const ttl = 1500 * time.Millisecond
		var cs []*cluster.Cluster
		for _, id := range []string{"two", "four"} {
			c, err := cluster.Open(context.Background(), jetStreamOf(t, s.ClientURL()), cluster.Config{Instance: id, LeaseTTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Claim(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		hs := []*partitionsHeld{{held: map[int]bool{}}, {held: map[int]bool{}}}
		begin := make(chan struct{})
		for i, n := range []int{first, 4} {
			c := cs[i]
			c.SetReady(func() map[string]int { return map[string]int{"p": n} })
			wg.Go(func() { c.KeepMembership(ctx) })
			wg.Go(func() { <-begin; c.HoldPartitions(ctx, "p", n, hs[i].set, func() {}) })
		}
		close(begin)
		both := 0
		for end := time.Now().Add(ttl); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
			if len(hs[0].list()) > 0 && len(hs[1].list()) > 0 {
				both++
			}
		}
		cancel()
		wg.Wait()
		if both > 0 {
			t.Fatalf("run %d: both shapers held partitions at once (%d samples), the %d-partition one %v, the 4-partition one %v", run+1, both, first, hs[0].list(), hs[1].list())
		}
	}
}

// The documented way to change a policy's partitions is to restart the
// shapers with the new file: once the last shaper with the old number
// stopped gracefully, one started with another number drains at once,
// not after standing by for the old layout entry to expire.
func TestNewLayoutAfterTheLastShaperStopped(t *testing.T) {
	s := testenv.NATS(t)
	const ttl = 1500 * time.Millisecond
	four, stop := holdParts(t, s.ClientURL(), "four", 4, ttl)
	waitHeld(t, "the first shaper to hold its 4 partitions", func() bool { return len(four.list()) == 4 })
	time.Sleep(ttl / 2) // the layout entry renewed since
	stop()
	start := time.Now()
	two, _ := holdParts(t, s.ClientURL(), "two", 2, ttl)
	waitHeld(t, "the new shaper to hold its 2 partitions", func() bool { return len(two.list()) == 2 })
	if took := time.Since(start); took > ttl/2 {
		t.Errorf("the shaper with 2 partitions drained %v after the last with 4 stopped gracefully, want at once (the old layout entry's TTL is %v)", took, ttl)
	}
}
