package cluster_test

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
)

// A hand-over entry carries the keys' last attempts, the slots they had
// reserved under the total cap and the cap's next slot to the next holder; an entry of an
// earlier release (last attempts only) still reads, and an entry of this
// one reads, for that release, as last attempts only: the slots' names
// are no key token.
func TestHandoverCarriesPaceAndSlots(t *testing.T) {
	js := jetStreamOf(t, testenv.NATS(t).ClientURL())
	ctx := context.Background()
	c, err := cluster.Open(ctx, js, cluster.Config{Instance: "a", LeaseTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(time.Now().UnixMilli())
	want := cluster.Handover{
		Last: map[string]time.Time{"k0": at, "~a2V5": at.Add(-time.Second)},
		Cap: drain.CapOrder{
			Slots: map[string]time.Time{"k1": at.Add(500 * time.Millisecond), "~a2V5": at.Add(time.Second)},
			Next:  at.Add(1500 * time.Millisecond),
		},
	}
	lease := cluster.PartitionLease("p", 1, 4)
	c.PutHandover(ctx, lease, want)
	got := c.TakeHandover(ctx, lease)
	if !maps.EqualFunc(got.Last, want.Last, time.Time.Equal) || !maps.EqualFunc(got.Cap.Slots, want.Cap.Slots, time.Time.Equal) || !got.Cap.Next.Equal(want.Cap.Next) {
		t.Fatalf("TakeHandover = %+v, want %+v", got, want)
	}

	kv, err := js.KeyValue(ctx, "SHAPER_LEASES")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "handover."+lease)
	if err != nil {
		t.Fatal(err)
	}
	var stored map[string]int64 // as an earlier release reads the entry
	if err := json.Unmarshal(e.Value(), &stored); err != nil {
		t.Fatalf("entry %s: %v", e.Value(), err)
	}
	for name := range stored {
		if _, last := want.Last[name]; !last && !strings.Contains(name, ".") {
			t.Errorf("entry holds %q: neither a key's last attempt nor a name no key token can have", name)
		}
	}

	old := `{"k0":` + strconv.FormatInt(at.UnixMilli(), 10) + `}` // an earlier release's entry
	if _, err := kv.Put(ctx, "handover."+lease, []byte(old)); err != nil {
		t.Fatal(err)
	}
	got = c.TakeHandover(ctx, lease)
	if len(got.Cap.Slots) != 0 || !got.Cap.Next.IsZero() || !got.Last["k0"].Equal(at) || len(got.Last) != 1 {
		t.Errorf("an earlier release's entry reads as %+v, want k0's last attempt only", got)
	}
	if got := c.TakeHandover(ctx, cluster.PartitionLease("p", 2, 4)); len(got.Last)+len(got.Cap.Slots) != 0 {
		t.Errorf("no entry reads as %+v, want nothing", got)
	}
}

// jetStreamOf connects to the server at url, until the test ends.
func jetStreamOf(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
