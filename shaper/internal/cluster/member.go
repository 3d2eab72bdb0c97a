package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Member is what a shaper writes in its membership entry: enough for
// another shaper claiming the same instance id to say who holds it.
type Member struct {
	Instance string    `json:"instance"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	HTTP     string    `json:"http"`
	Started  time.Time `json:"started"`
	Nonce    string    `json:"nonce"` // tells this run's entry from an earlier one's
	// Policies holds a digest of each policy as the shaper's file sets
	// it (SetFileDigests).
	Policies map[string]string `json:"policies,omitempty"`
}

func (m Member) String() string {
	return fmt.Sprintf("pid %d on %s (HTTP %s, since %s)", m.PID, m.Host, m.HTTP, m.Started.Format(time.RFC3339))
}

// claims holds the nonces of the claims made in this process and not yet
// withdrawn: an entry with this process's pid is a live claim if it is
// here, and an earlier run's (a restarted container is pid 1 again) if not.
var claims sync.Map

func claimedHere(nonce string) bool {
	_, ok := claims.Load(nonce)
	return ok
}

// ErrInstanceInUse is returned by Claim when a live shaper holds the
// instance id.
var ErrInstanceInUse = errors.New("instance id in use")

// Claim makes this shaper the holder of its instance id: two shapers with
// one id would both think they hold its leases. An entry left by an
// earlier run on this host whose process is gone is taken over at once; an
// entry of another live shaper is refused with ErrInstanceInUse naming it,
// after watching it for a lease lifetime (an entry nobody renews expires).
func (c *Cluster) Claim(ctx context.Context, http string) error {
	host, _ := os.Hostname()
	c.me = Member{Instance: c.cfg.Instance, Host: host, PID: os.Getpid(), HTTP: http, Started: time.Now().UTC(), Nonce: nuid.Next()}
	me, _ := json.Marshal(c.me)
	key := memberKey(c.cfg.Instance)
	deadline := time.Now().Add(c.cfg.LeaseTTL + time.Second)
	var seen uint64 // the holder's revision when first seen
	for {
		_, err := c.leases.Create(ctx, key, me)
		if err == nil {
			claims.Store(c.me.Nonce, true)
		}
		if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		e, err := c.leases.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired in between
		}
		if err != nil {
			return err
		}
		var other Member
		if json.Unmarshal(e.Value(), &other) != nil || other.Host == host && !processAlive(other.PID) ||
			other.Host == host && other.PID == c.me.PID && !claimedHere(other.Nonce) {
			// An earlier run of this shaper (or an entry without a holder).
			_, err := c.leases.Update(ctx, key, me, e.Revision())
			if err == nil {
				claims.Store(c.me.Nonce, true)
			}
			if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
				return err
			}
			continue
		}
		switch {
		case seen == 0:
			seen = e.Revision()
		case e.Revision() != seen || time.Now().After(deadline):
			return fmt.Errorf("%w: %q is held by %s", ErrInstanceInUse, c.cfg.Instance, other)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.cfg.LeaseTTL / 6):
		}
	}
}
