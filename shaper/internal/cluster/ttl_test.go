package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
)

// A shaper starting with another lease TTL than the running ones' is
// refused, naming theirs: the leases bucket's TTL is every lease's, and
// changing it under them let a lease expire while its holder still
// delivered. The same instance restarted, or a cluster whose shapers are
// all gone, may change it.
func TestLeaseTTLOfTheCluster(t *testing.T) {
	s := testenv.NATS(t)
	js := jetStreamOf(t, s.ClientURL())
	ctx := context.Background()
	a, err := cluster.Open(ctx, js, cluster.Config{Instance: "a", LeaseTTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Claim(ctx, "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	ttl := func() time.Duration {
		kv, err := js.KeyValue(ctx, "SHAPER_LEASES")
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.TTL()
	}

	_, err = cluster.Open(ctx, js, cluster.Config{Instance: "b", LeaseTTL: 2 * time.Second})
	if !errors.Is(err, cluster.ErrLeaseTTL) || !strings.Contains(err.Error(), "another shaper of this cluster runs with --lease-ttl 6s, this one asks 2s") {
		t.Fatalf("Open with another TTL beside a running shaper: %v, want ErrLeaseTTL naming 6s", err)
	}
	if got := ttl(); got != 6*time.Second {
		t.Fatalf("after the refusal the leases' TTL is %s, want 6s unchanged", got)
	}
	if _, err := cluster.Open(ctx, js, cluster.Config{Instance: "b", LeaseTTL: 6 * time.Second}); err != nil {
		t.Fatalf("Open with the cluster's TTL: %v", err)
	}

	// Its own entry (a restart after kill -9) does not count.
	if _, err := cluster.Open(ctx, js, cluster.Config{Instance: "a", LeaseTTL: 3 * time.Second}); err != nil {
		t.Fatalf("the same instance with a new TTL: %v", err)
	}
	if got := ttl(); got != 3*time.Second {
		t.Fatalf("the leases' TTL is %s, want 3s", got)
	}

	// Every shaper gone (its entry deleted, as a shaper stopping does):
	// the next one sets the TTL.
	kv, err := js.KeyValue(ctx, "SHAPER_LEASES")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeysFiltered(ctx, "member.>")
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if err := kv.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cluster.Open(ctx, js, cluster.Config{Instance: "c", LeaseTTL: 2 * time.Second}); err != nil {
		t.Fatalf("Open with a new TTL, no shaper running: %v", err)
	}
	if got := ttl(); got != 2*time.Second {
		t.Fatalf("the leases' TTL is %s, want 2s", got)
	}
}

// A holder that renews its leases on time is never reported as missing a
// renewal, though Drainers answers from a read up to a second old (which
// the report counted as time without a renewal: at a TTL of 3 s, a holder
// renewing every second was reported most of the time).
func TestDrainersHealthyHolderNotUnrenewed(t *testing.T) {
	s := testenv.NATS(t)
	const ttl = 3 * time.Second
	h, _ := holdParts(t, s.ClientURL(), "a", 2, ttl)
	waitHeld(t, "a holding both partitions", func() bool { return len(h.list()) == 2 })
	watcher, err := cluster.Open(context.Background(), jetStreamOf(t, s.ClientURL()), cluster.Config{Instance: "watcher", LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(4 * ttl); time.Now().Before(end); time.Sleep(130 * time.Millisecond) {
		if holders, unrenewed := watcher.Drainers(context.Background(), "p", 2); len(unrenewed) > 0 {
			t.Fatalf("Drainers = %v, unrenewed %v: a holder renewing every %s reported as missing its renewals", holders, unrenewed, ttl/3)
		}
	}
}
