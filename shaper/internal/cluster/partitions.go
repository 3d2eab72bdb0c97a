package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A policy drained in n > 1 partitions has one lease per partition,
// <policy>.p<i>, and the partitions are shared out over the live shapers:
// each shaper holds the leases of the partitions Assign gives it by the
// membership it reads (every LeaseTTL/6), releases those it is no longer
// given (a graceful release: the entry is deleted), and stands by eagerly
// for those given to it that another shaper still holds, taking each the
// moment it is released or expires. A shaper that dies is noticed when
// its membership entry expires, LeaseTTL after its last renewal at most
// (that is when its loss is certain), and its partitions' new holders
// take their leases as each expires, within LeaseTTL/30 of it. The leases
// keep their guarantee, whatever the shapers think of the membership: two
// shapers that disagree for a moment both stand by for one partition, and
// one of them holds it.

// membersState is the ready shapers as last read: what each drains.
type membersState struct {
	mu      sync.Mutex
	ready   map[string]readyValue // by member id
	changed chan struct{}         // closed when ready changes
}

// readyValue is what a ready entry says: the policies the shaper serves,
// with the number of partitions its policy file gives each, and the ways
// of sharing them out it knows (Assign). Partitions of a policy are shared
// out only over the shapers that drain it in the same number of
// partitions.
type readyValue struct {
	Policies map[string]int `json:"policies"`
	// Assign is the newest way of sharing partitions out the shaper
	// knows: 0 (absent, releases before it) the rotation, assignBalanced
	// the balanced one. The members use the newest they all know, so
	// that a rolling upgrade never leaves a partition that no member
	// thinks is its own.
	Assign int `json:"assign,omitempty"`
}

// assignBalanced names the balanced way of sharing partitions out
// (Assign), which this release knows and says in its ready entry.
const assignBalanced = 1

func (v readyValue) equal(w readyValue) bool {
	return v.Assign == w.Assign && maps.Equal(v.Policies, w.Policies)
}

// Self returns this shaper's member id, the one Members lists for it.
func (c *Cluster) Self() string { return strings.TrimPrefix(memberKey(c.cfg.Instance), "member.") }

// Members returns the ids of the ready shapers (SetReady) that serve
// policy in n partitions, as last read (sorted), whether they all know the
// balanced way of sharing partitions out, and a channel closed when the
// ready shapers change.
func (c *Cluster) Members(policy string, n int) (ids []string, balanced bool, changed <-chan struct{}) {
	c.members.mu.Lock()
	defer c.members.mu.Unlock()
	if c.members.changed == nil {
		c.members.changed = make(chan struct{})
	}
	balanced = true
	for id, v := range c.members.ready {
		if v.Policies[policy] == n {
			ids = append(ids, id)
			balanced = balanced && v.Assign >= assignBalanced
		}
	}
	slices.Sort(ids)
	return ids, balanced, c.members.changed
}

// setMembers records the ready shapers read, and reports whether they
// changed.
func (c *Cluster) setMembers(ready map[string]readyValue) bool {
	c.members.mu.Lock()
	defer c.members.mu.Unlock()
	if maps.EqualFunc(ready, c.members.ready, readyValue.equal) {
		return false
	}
	c.members.ready = ready
	if c.members.changed != nil {
		close(c.members.changed)
		c.members.changed = nil
	}
	return true
}

// readMembers reads the member entries, and with ready each ready entry:
// it records the ready shapers (Members), and returns how many shapers
// are alive, ready or not.
func (c *Cluster) readMembers(ctx context.Context, ready bool) (alive int64, err error) {
	filters := []string{"member.*"}
	if ready {
		filters = append(filters, "ready.*")
	}
	l, err := c.leases.ListKeysFiltered(ctx, filters...)
	if err != nil {
		return 0, err
	}
	readyOnes := map[string]readyValue{}
	var memberKeys []string
	for k := range l.Keys() {
		id, ok := strings.CutPrefix(k, "ready.")
		if !ok {
			alive++
			memberKeys = append(memberKeys, k)
			continue
		}
		e, err := c.leases.Get(ctx, k)
		if err != nil {
			continue // expired meanwhile
		}
		var v readyValue
		if json.Unmarshal(e.Value(), &v) == nil {
			readyOnes[id] = v
		}
	}
	if ready {
		c.setMembers(readyOnes)
	}
	c.compareFiles(c.readMemberValues(ctx, memberKeys))
	return alive, nil
}

// PartitionLease returns the name of the lease of partition i of n of
// policy: the policy's name with one partition (the lease of releases
// before partitions), <policy>.p<i> with more.
func PartitionLease(policy string, i, n int) string {
	if n <= 1 {
		return policy
	}
	return policy + ".p" + strconv.Itoa(i)
}

// Assign returns which of the n partitions of policy the member self
// drains among the live members: each member gets ⌊n/m⌋ or ⌈n/m⌉ of them,
// and the policies' extra partitions fall on different members. A self
// not among members (its entry not read yet) counts as one of them.
//
// balanced (every member knows it: Members) shares them so that a member
// joining or leaving moves few partitions: partition i goes to the member
// ranked first for it (a hash of the policy, i and the member) among
// those with room left, the members ranked first for the policy getting
// the ⌈n/m⌉. A join of a third member to two moves about a third of the
// partitions (3.2 of 8 on average), where the rotation below moves two
// thirds (5.2 of 8: TestAssignMovesFew). Without balanced, partition i goes to the member at
// (i + h) mod m in the sorted list, h a hash of the policy's name: the
// way of releases before the balanced one.
func Assign(policy string, n int, members []string, self string, balanced bool) []bool {
	if !slices.Contains(members, self) {
		members = append(slices.Clone(members), self)
		slices.Sort(members)
	}
	mine := make([]bool, n)
	if !balanced {
		h := fnv.New32a()
		h.Write([]byte(policy))
		off := int(h.Sum32() % uint32(len(members)))
		for i := range n {
			mine[i] = members[(i+off)%len(members)] == self
		}
		return mine
	}
	m := len(members)
	room := make(map[string]int, m)
	for r, id := range byRank(members, policy, "") {
		room[id] = n / m
		if r < n%m {
			room[id]++
		}
	}
	for i := range n {
		for _, id := range byRank(members, policy, strconv.Itoa(i)) {
			if room[id] > 0 {
				room[id]--
				mine[i] = id == self
				break
			}
		}
	}
	return mine
}

// byRank returns members ordered by their rank for policy's partition i
// ("": for the policy): a hash of the three, highest first, ties by id.
// Each member's hash is computed once.
func byRank(members []string, policy, i string) []string {
	type ranked struct {
		id    string
		score uint64
	}
	rs := make([]ranked, len(members))
	for n, id := range members {
		h := fnv.New64a()
		for _, part := range []string{policy, i, id} {
			h.Write([]byte(part))
			h.Write([]byte{0})
		}
		x := h.Sum64() // FNV's high bits mix little: a final avalanche
		x ^= x >> 33
		x *= 0xff51afd7ed558ccd
		x ^= x >> 33
		rs[n] = ranked{id, x}
	}
	slices.SortFunc(rs, func(a, b ranked) int { return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.id, b.id)) })
	out := make([]string, len(rs))
	for n, r := range rs {
		out[n] = r.id
	}
	return out
}

// HoldPartitions holds the leases of the partitions of policy name that
// Assign gives this shaper (with one partition: stands by for the policy's
// one lease, as every shaper does), following the membership, until ctx
// ends; then it releases them. While other shapers drain the policy in
// another number of partitions (checkLayout), it holds none. held(i, …) is HoldLease's held for
// partition i, called from one goroutine per partition. first is called
// once the first attempt at each partition given at the start is over.
func (c *Cluster) HoldPartitions(ctx context.Context, name string, n int, held func(i int, holding bool, until time.Time), first func()) {
	type holding struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	running := make([]*holding, n)
	if n > 1 {
		c.partitioned.Add(1)
		defer c.partitioned.Add(-1)
		c.wake() // write the ready entry now
	}
	defer func() {
		for _, h := range running {
			if h != nil {
				<-h.done // each released its lease when ctx ended
			}
		}
		c.leaveLayout(context.WithoutCancel(ctx), name, n)
	}()
	var (
		firsts    sync.WaitGroup
		held0     atomic.Bool // this shaper holds partition 0: it keeps the layout entry
		conflict  bool        // another layout is in use: stand by
		looked    time.Time   // when the layout was last looked at
		lastOther int         // what that look said
	)
	start := true
	tick := time.NewTicker(c.cfg.LeaseTTL / 6)
	defer tick.Stop()
	for {
		members, balanced, changed := c.Members(name, n)
		if start {
			rctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/3)
			c.readMembers(rctx, true)
			cancel()
			members, balanced, changed = c.Members(name, n)
		}
		mine := Assign(name, n, members, c.Self(), balanced)
		if n == 1 {
			mine[0] = true // every shaper stands by for a policy's one lease
		}
		// The layout is looked at every LeaseTTL/3: often enough to renew
		// its entry, little enough not to load the bucket while it elects
		// a leader.
		other := lastOther
		if time.Since(looked) >= c.cfg.LeaseTTL/3-c.cfg.LeaseTTL/12 {
			other, looked = c.checkLayout(ctx, name, n, running[0] != nil && held0.Load()), time.Now()
			lastOther = other
		}
		if other != 0 {
			c.inUse.Store(name, other)
		} else {
			c.inUse.Delete(name)
		}
		switch {
		case other != 0 && !conflict:
			c.log.Error("policy drained in another number of partitions by other shapers: this shaper stands by until they stop (give every shaper the same policy file)",
				"policy", name, "partitions_here", n, "partitions_there", other)
			fallthrough
		case other != 0:
			conflict = true
			clear(mine)
		case conflict:
			conflict = false
			c.log.Info("policy's partitions agree again: draining", "policy", name, "partitions", n)
		}
		for i, h := range running {
			if h != nil && closed(h.done) {
				running[i], h = nil, nil
			}
			switch {
			case h != nil && !mine[i]:
				h.cancel() // released at once; given back, restarted once done
			case h == nil && mine[i]:
				hctx, cancel := context.WithCancel(ctx)
				h = &holding{cancel: cancel, done: make(chan struct{})}
				running[i] = h
				var once func()
				if start {
					firsts.Add(1)
					once = firsts.Done
				}
				go func() {
					defer close(h.done)
					c.holdLease(hctx, PartitionLease(name, i, n), leaseLog(name, i, n), n > 1, func(on bool, until time.Time) {
						if i == 0 {
							held0.Store(on)
						}
						held(i, on, until)
					}, once)
				}()
			}
		}
		if start {
			start = false
			firsts.Wait()
			first()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
