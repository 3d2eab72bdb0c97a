package shaper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Several shapers may share one JetStream cluster. All of them admit jobs
// (the per-key limit is JetStream's, so it holds globally), but each policy
// is drained by one shaper at a time, so that a key's rate holds globally
// too: the one holding the policy's lease, an entry in the SHAPER_LEASES
// key-value bucket that its holder renews every LeaseTTL/3 and that expires
// LeaseTTL after the holder stops. A shaper that fails to renew stops
// draining at once; another takes the lease over when it has expired. A
// restarted shaper with the same instance id takes its own lease back at
// once. Like every lease this is not a fence: two shapers can briefly both
// deliver across a network partition, which at-least-once delivery allows.
const (
	leaseBucket = "SHAPER_LEASES"
	// DefaultLeaseTTL is how long a policy's drain stays with a shaper that stopped renewing.
	DefaultLeaseTTL = 6 * time.Second
)

func defaultInstanceID(httpAddr string) string {
	host, _ := os.Hostname()
	return host + "/" + httpAddr
}

func (s *Shaper) openLeases(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      leaseBucket,
		Description: "which shaper drains each policy",
		TTL:         s.cfg.LeaseTTL,
		History:     1,
		Replicas:    s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("shaper: leases: %w", err)
	}
	return kv, nil
}

// holdLease keeps trying to hold the drain lease of policy name, switching
// rt's drainers on while it holds it and off when it does not, until ctx ends.
// first is told once the first attempt is over, so that a lone shaper
// drains from the moment it is ready.
func (s *Shaper) holdLease(ctx context.Context, kv jetstream.KeyValue, name string, rt *runtime, first func()) {
	var rev uint64
	held := false
	set := func(on bool) {
		if held != on {
			held = on
			rt.d.SetActive(on)
			rt.deferD.SetActive(on)
			if on {
				s.log.Info("draining policy", "policy", name, "instance", s.cfg.InstanceID)
			} else {
				s.log.Warn("stopped draining policy: lease lost", "policy", name, "instance", s.cfg.InstanceID)
			}
		}
	}
	tick := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseTTL/3)
		var err error
		if held {
			rev, err = kv.Update(cctx, name, []byte(s.cfg.InstanceID), rev)
			if err != nil {
				set(false)
			}
		} else {
			rev, err = s.takeLease(cctx, kv, name)
			if err == nil {
				set(true)
			}
		}
		cancel()
		if first != nil {
			first()
			first = nil
		}
		select {
		case <-ctx.Done():
			if held {
				// Hand the lease over at once on a graceful stop.
				dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
				kv.Delete(dctx, name, jetstream.LastRevision(rev))
				dcancel()
			}
			return
		case <-tick.C:
		}
	}
}

// takeLease creates the lease, or takes back one this instance held before
// a restart.
func (s *Shaper) takeLease(ctx context.Context, kv jetstream.KeyValue, name string) (uint64, error) {
	rev, err := kv.Create(ctx, name, []byte(s.cfg.InstanceID))
	if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
		return rev, err
	}
	e, err := kv.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	if string(e.Value()) != s.cfg.InstanceID {
		return 0, jetstream.ErrKeyExists
	}
	return kv.Update(ctx, name, []byte(s.cfg.InstanceID), e.Revision())
}
