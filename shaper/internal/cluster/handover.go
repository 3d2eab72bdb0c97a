package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
)

// handoverKey names the entry in which the last holder of a lease leaves
// its keys' last attempts for the next one (PutHandover), in the
// hand-overs bucket, which keeps it until the next hand-over of the lease
// overwrites it: a key's next slot can be an hour or a day after its last
// attempt, past any lease TTL. An earlier release kept it in the leases
// bucket, where it expired with the lease TTL (so a lone shaper stopped
// for longer than that started every key afresh); it is written there
// too, for such a release's next holder during a rolling upgrade.
//
// An old entry read by a holder that comes after a crash is harmless: the
// attempts it names are older than the crashed holder's, so they hold no
// key back.
func handoverKey(lease string) string { return "handover." + lease }

// Handover is what the last holder of a partition leaves its next holder:
// by key token, each key's last attempt (drain.Drainer.LastStarts), which
// keeps the key's pace, and the keys' places under the total cap
// (drain.Drainer.CapOrder), which keep the cap's order.
type Handover struct {
	Last map[string]time.Time
	Cap  drain.CapOrder
}

// slotPrefix marks a reserved slot in a hand-over entry, beside the last
// attempts, and alone the cap's next slot: a key token is never empty and
// never holds a '.', so a shaper of an earlier release, which reads the
// entry as last attempts only, finds no key of that name and skips it.
const slotPrefix = "cap."

// PutHandover leaves h for the next holder of a lease (Handover), before
// this shaper releases it. Errors are logged: without the entry the next
// holder may start a key up to one interval early, or in another's slot
// under the cap.
func (c *Cluster) PutHandover(ctx context.Context, lease string, h Handover) {
	if len(h.Last) == 0 && len(h.Cap.Slots) == 0 && h.Cap.Next.IsZero() {
		return
	}
	ms := make(map[string]int64, len(h.Last)+len(h.Cap.Slots)+1)
	for token, at := range h.Last {
		ms[token] = at.UnixMilli()
	}
	for token, at := range h.Cap.Slots {
		ms[slotPrefix+token] = at.UnixMilli()
	}
	if !h.Cap.Next.IsZero() {
		ms[slotPrefix] = h.Cap.Next.UnixMilli()
	}
	b, _ := json.Marshal(ms)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/6)
	defer cancel()
	if _, err := c.handovers.Put(ctx, handoverKey(lease), b); err != nil {
		c.log.Warn("partition hand-over: keys' last attempts not left for the next holder", "lease", lease, "err", err)
	}
	if _, err := c.leases.Put(ctx, handoverKey(lease), b); err != nil {
		c.log.Debug("partition hand-over: not left for an earlier release", "lease", lease, "err", err)
	}
}

// TakeHandover returns what the previous holder of a lease left
// (PutHandover): nothing when it left none. Of the entries in the
// hand-overs bucket and in the leases bucket (an earlier release's, in a
// rolling upgrade), the one written last.
func (c *Cluster) TakeHandover(ctx context.Context, lease string) Handover {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/6)
	defer cancel()
	var e jetstream.KeyValueEntry
	for _, kv := range []jetstream.KeyValue{c.handovers, c.leases} {
		if x, err := kv.Get(ctx, handoverKey(lease)); err == nil && (e == nil || x.Created().After(e.Created())) {
			e = x
		}
	}
	if e == nil {
		return Handover{}
	}
	var ms map[string]int64
	if json.Unmarshal(e.Value(), &ms) != nil {
		return Handover{}
	}
	h := Handover{Last: map[string]time.Time{}, Cap: drain.CapOrder{Slots: map[string]time.Time{}}}
	for name, at := range ms {
		token, slot := strings.CutPrefix(name, slotPrefix)
		switch {
		case !slot:
			h.Last[name] = time.UnixMilli(at)
		case token == "":
			h.Cap.Next = time.UnixMilli(at)
		default:
			h.Cap.Slots[token] = time.UnixMilli(at)
		}
	}
	return h
}
