package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLeaseTTL is returned by Open when the shapers already running on the
// cluster use another lease TTL.
var ErrLeaseTTL = errors.New("lease TTL differs from the cluster's")

// sameLeaseTTL refuses a lease TTL other than the one of the leases bucket
// while a shaper other than instance has its membership entry there: the
// bucket's TTL is every lease's, so a shaper starting with another would
// change it under the running ones, which renew and give up their leases
// on the old one's schedule (a shorter TTL lets a lease expire while its
// holder still delivers: duplicates beyond the one in flight). With no
// other shaper there, the TTL may change: Open updates the bucket.
func sameLeaseTTL(ctx context.Context, js jetstream.JetStream, instance string, ttl time.Duration) error {
	kv, err := js.KeyValue(ctx, leaseBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return err
	}
	now := st.TTL()
	if now == ttl || now == 0 {
		return nil
	}
	keys, err := kv.ListKeysFiltered(ctx, "member.>")
	if err != nil {
		return err
	}
	others := 0
	for k := range keys.Keys() {
		if k != memberKey(instance) {
			others++
		}
	}
	if others == 0 {
		return nil
	}
	who := "another shaper of this cluster runs"
	if others > 1 {
		who = fmt.Sprintf("%d other shapers of this cluster run", others)
	}
	return fmt.Errorf("%w: %s with --lease-ttl %s, this one asks %s: every shaper of a cluster must use the same; "+
		"start this one with --lease-ttl %s, or stop them all and start them with the new TTL (a stopped shaper's entry lasts up to %s after it)",
		ErrLeaseTTL, who, now, ttl, now, now)
}
