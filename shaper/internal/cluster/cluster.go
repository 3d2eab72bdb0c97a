// Package cluster is what shapers sharing one JetStream cluster agree on:
// which shaper drains each policy (leases), how many shapers are alive
// (membership), and the live policy overrides every shaper applies.
//
// All shapers admit jobs (the per-key limit is JetStream's, so it holds
// globally), but each policy is drained by one shaper at a time, so that a
// key's rate holds globally too: the one holding the policy's lease, an
// entry in the SHAPER_LEASES key-value bucket that its holder renews every
// LeaseTTL/3 and that expires LeaseTTL after it was last written. The
// protocol is a pure state machine (leasemachine.go) that HoldLease drives
// with the bucket and a clock. It is also a fence: the holder delivers
// only until its deadline, LeaseTTL − LeaseTTL/12 after it sent its last
// successful write, on its own monotonic clock, and no other shaper takes
// the lease before that deadline has passed (the argument is in
// leasemachine.go). A holder whose renewals fail (a JetStream election)
// keeps the lease and resumes when a renewal gets through, but delivers
// nothing past its deadline; one frozen past it (a stopped process, a long
// GC pause) wakes up delivering nothing. Another shaper takes the lease
// over LeaseTTL after the holder's last renewal. A restarted shaper with
// the same instance id takes its own lease back at once.
//
// Shapers count each other through member.<hash of id> entries in the same
// bucket, renewed with the leases and expiring with them: while Redis is
// lost, a fail-open admission limit enforces this shaper's share of it.
//
// Live policy changes are kept in the SHAPER_POLICIES bucket, which every
// shaper watches and applies, and which outlives restarts.
package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

const (
	leaseBucket  = "SHAPER_LEASES"
	policyBucket = "SHAPER_POLICIES"
	// handoverBucket keeps what the last holder of a partition left its
	// next (PutHandover) for as long as a key's pace may need it: a
	// policy's interval can be far longer than the lease TTL.
	handoverBucket = "SHAPER_HANDOVER"
	// DefaultLeaseTTL is how long a policy's drain stays with a shaper that
	// stopped renewing its lease (the failover time).
	DefaultLeaseTTL = 6 * time.Second
)

// DefaultInstance names a shaper by its host and HTTP address.
func DefaultInstance(httpAddr string) string {
	host, _ := os.Hostname()
	return host + "/" + httpAddr
}

// Config holds a Cluster's settings. Instance is required.
type Config struct {
	Instance string        // this shaper's name in leases and membership
	LeaseTTL time.Duration // default DefaultLeaseTTL
	Replicas int           // replicas of the buckets it creates
	Logger   *slog.Logger
	Clock    Clock // of the leases' deadlines; default time.Now
}

// Cluster is this shaper's membership of the cluster. Safe for concurrent use.
type Cluster struct {
	cfg       Config
	log       *slog.Logger
	leases    jetstream.KeyValue
	handovers jetstream.KeyValue // without a TTL: see handoverBucket
	overrides jetstream.KeyValue
	shapers   atomic.Int64
	members   membersState
	ready     atomic.Bool // SetReady was called
	// partitioned counts the policies drained in partitions here
	// (HoldPartitions with n > 1): only they need the ready entries, read
	// every LeaseTTL/6; without any, the membership is read every
	// LeaseTTL/3 and no ready entry is written.
	partitioned atomic.Int32
	layouts     atomic.Pointer[func() map[string]int]
	kick        chan struct{} // SetReady's word to KeepMembership, and the other shapers' (membersSubject)
	nc          *nats.Conn
	drainers    drainersCache
	me          Member // set by Claim
	// The renewals of this shaper's member entry, which JetStream stores
	// only with a quorum of the bucket's servers: the last one stored
	// (unix ns), and the last failure when a later one failed.
	renewedAt atomic.Int64
	renewErr  atomic.Pointer[error]
	// digests gives this shaper's file digests (SetFileDigests); differs
	// holds, per policy, the shapers whose file sets it otherwise.
	digests atomic.Pointer[func() map[string]string]
	differs atomic.Pointer[map[string][]string]
	// warnedFiles holds the differences logged, per policy (compareFiles,
	// which filesMu serializes).
	filesMu     sync.Mutex
	warnedFiles map[string][]string
	// filesChanged asks the membership's loop to renew this shaper's entry
	// at once, with its new file digests (FilesChanged).
	filesChanged atomic.Bool
	// inUse holds, per policy, the number of partitions other shapers
	// drain it in when it is not this shaper's (LayoutInUse).
	inUse sync.Map
}

// Open creates or binds the buckets of leases, membership and overrides.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Cluster, error) {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1), nc: js.Conn()}
	if err := sameLeaseTTL(ctx, js, cfg.Instance, cfg.LeaseTTL); err != nil {
		return nil, fmt.Errorf("leases: %w", err)
	}
	var err error
	c.leases, err = bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      leaseBucket,
		Description: "which shaper drains each policy",
		TTL:         cfg.LeaseTTL,
		History:     1,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("leases: %w", err)
	}
	c.handovers, err = bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      handoverBucket,
		Description: "each partition's keys' last attempts, left by its last holder for the next",
		History:     1,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("hand-overs: %w", err)
	}
	c.overrides, err = bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      policyBucket,
		Description: "live policy overrides",
		History:     5,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("policy overrides: %w", err)
	}
	return c, nil
}

// bucket creates the bucket cfg describes, or updates it to cfg. Creating
// comes first: it is idempotent, while an update racing another shaper's
// creation of the same new bucket can go unanswered.
func bucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.UpdateKeyValue(ctx, cfg)
	}
	return kv, err
}

// Shapers returns how many shapers are alive, at least 1.
func (c *Cluster) Shapers() int64 { return max(c.shapers.Load(), 1) }

func memberKey(instance string) string {
	sum := sha256.Sum256([]byte(instance))
	return "member." + hex.EncodeToString(sum[:8])
}

// SetReady says that this shaper serves every policy: from now on the
// partitions of policies are shared out to it (HoldPartitions), which it
// stands by for already. layouts returns the policies it serves, with
// the number of partitions of each; it is asked again at every renewal
// (a reload may add or remove policies).
func (c *Cluster) SetReady(layouts func() map[string]int) {
	c.layouts.Store(&layouts)
	c.ready.Store(true)
	c.wake()
}

// membersSubject is where a shaper says that its ready entry came or
// went, so that the others read the membership at once, not at their next
// read (every LeaseTTL/6): a graceful join or leave then moves partitions
// within milliseconds. The word is a hint: a lost one costs that wait.
const membersSubject = "_shaper.members.changed"

// wake has KeepMembership write and read the membership now.
func (c *Cluster) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// KeepMembership renews this shaper's member entry (made by Claim), and
// once it is ready (SetReady) and drains a policy in partitions its ready
// entry, every LeaseTTL/3; it reads the members every LeaseTTL/3, or every
// LeaseTTL/6 while it drains a policy in partitions, and at once when a
// shaper's ready entry came or went (membersSubject, which it says of its
// own); until ctx ends, then it withdraws.
func (c *Cluster) KeepMembership(ctx context.Context) {
	key, readyKey := memberKey(c.cfg.Instance), "ready."+c.Self()
	tick := time.NewTicker(c.cfg.LeaseTTL / 6)
	defer tick.Stop()
	var renewed, read time.Time
	wasReady := false
	c.renewedAt.Store(c.cfg.Clock.Now().UnixNano()) // a start counts as answered: Open's requests were
	if sub, err := c.nc.Subscribe(membersSubject, func(*nats.Msg) { c.wake() }); err == nil {
		defer sub.Unsubscribe()
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/6)
		me := c.memberValue()
		var err error
		partitioned := c.partitioned.Load() > 0
		ready := c.ready.Load() && partitioned
		filesChanged := c.filesChanged.Swap(false)
		if filesChanged || time.Since(renewed) >= c.cfg.LeaseTTL/3-c.cfg.LeaseTTL/12 || ready != wasReady {
			if _, err = c.leases.Put(cctx, key, me); err == nil && ready {
				v, _ := json.Marshal(readyValue{Policies: (*c.layouts.Load())(), Assign: assignBalanced})
				_, err = c.leases.Put(cctx, readyKey, v)
			}
			c.noteRenewal(err)
			if err == nil {
				if ready != wasReady {
					c.nc.Publish(membersSubject, nil)
				}
				renewed, wasReady = time.Now(), ready
			}
		}
		if err == nil && (partitioned || time.Since(read) >= c.cfg.LeaseTTL/3-c.cfg.LeaseTTL/12) {
			read = time.Now()
			if n, err := c.readMembers(cctx, partitioned); err == nil {
				if old := c.shapers.Swap(n); old != n && old != 0 {
					c.log.Info("shapers on the cluster changed", "shapers", n)
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
			c.leases.Delete(dctx, readyKey)
			c.leases.Delete(dctx, key)
			if wasReady {
				c.nc.Publish(membersSubject, nil)
				c.nc.FlushWithContext(dctx)
			}
			dcancel()
			claims.Delete(c.me.Nonce)
			return
		case <-tick.C:
		case <-c.kick:
		}
	}
}

func (c *Cluster) noteRenewal(err error) {
	now := c.cfg.Clock.Now()
	_, _, was := c.Unanswered(now)
	if err != nil {
		c.renewErr.Store(&err)
		if since, last, is := c.Unanswered(now); is && !was {
			why := "JetStream stores nothing: not ready (a cluster without a quorum of its servers?)"
			if queue.StorageFull(last) {
				why = "JetStream stores nothing: not ready, its storage is full (the drain's lease is not renewed either: give JetStream more storage)"
			}
			c.log.Warn(why, "since", since.UTC().Format(time.RFC3339Nano), "err", last)
		}
		return
	}
	c.renewedAt.Store(now.UnixNano())
	c.renewErr.Store(nil)
	if was {
		c.log.Info("JetStream stores again: ready")
	}
}

// Unanswered reports whether JetStream has stored none of this shaper's
// membership renewals for over a lease TTL, when the last one failed:
// since its last stored renewal (or since KeepMembership started), and the
// last failure. A cluster that lost its quorum is connected but stores
// nothing: every job is answered 503 meanwhile. A lease TTL outlasts the
// election of a new leader of the bucket's stream after one node's loss
// (2–5 s), which stores nothing for its length either.
func (c *Cluster) Unanswered(now time.Time) (since time.Time, last error, unanswered bool) {
	if c == nil {
		return time.Time{}, nil, false
	}
	errp := c.renewErr.Load()
	ns := c.renewedAt.Load()
	if errp == nil || ns == 0 {
		return time.Time{}, nil, false
	}
	since = time.Unix(0, ns)
	if now.Sub(since) <= c.cfg.LeaseTTL {
		return time.Time{}, nil, false
	}
	return since, *errp, true
}

// WatchOverrides calls apply with every override stored now (p nil: the
// override was removed, back to the file), before it returns, and returns
// a function that goes on applying changes until ctx ends. An override is
// a policies.Patch: the merge of the live changes since the last reset
// (one stored by an earlier release as a whole policy reads as a Patch
// that sets every field, see policies.ParseOverride). A bad stored
// override is logged and skipped.
func (c *Cluster) WatchOverrides(ctx context.Context, apply func(name string, p *policies.Patch, rev uint64)) (follow func(), err error) {
	w, err := c.overrides.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch policy overrides: %w", err)
	}
	each := func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			apply(e.Key(), nil, e.Revision())
			return
		}
		p, err := policies.ParseOverride(e.Value())
		if err != nil {
			c.log.Error("bad policy override ignored", "policy", e.Key(), "err", err)
			return
		}
		apply(e.Key(), &p, e.Revision())
	}
	for e := range w.Updates() {
		if e == nil {
			break // the initial values are in
		}
		each(e)
	}
	return func() {
		defer w.Stop()
		for e := range w.Updates() {
			if e != nil {
				each(e)
			}
		}
	}, nil
}

// PutOverride changes the live override of policy name on every shaper:
// change is given the override stored now (the empty Patch when there is
// none, or when the stored one cannot be read) and returns the new one,
// which is stored unless change fails; an empty Patch is stored as no
// override ({}), so that it has a revision too. Should another shaper
// change the override meanwhile, change is called again with that one, so
// that no change is lost. It returns the override stored and its revision
// in the bucket (0 when nothing was stored: no override, none asked for),
// or change's error as it is. The watch (WatchOverrides) brings every
// shaper the same revisions in order: applying only revisions newer than
// the one applied keeps a late watch event from undoing a newer change.
func (c *Cluster) PutOverride(ctx context.Context, name string, change func(old policies.Patch) (policies.Patch, error)) (policies.Patch, uint64, error) {
	for {
		var old policies.Patch
		var rev uint64
		e, err := c.overrides.Get(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return policies.Patch{}, 0, err
		default:
			rev = e.Revision()
			if old, err = policies.ParseOverride(e.Value()); err != nil {
				c.log.Error("bad policy override replaced", "policy", name, "err", err)
				old = policies.Patch{}
			}
		}
		next, err := change(old)
		if err != nil {
			return policies.Patch{}, 0, err
		}
		var stored uint64
		switch b, merr := json.Marshal(next); {
		case merr != nil:
			return policies.Patch{}, 0, merr
		case next.IsEmpty() && rev == 0:
			return next, 0, nil
		case rev == 0:
			stored, err = c.overrides.Create(ctx, name, b)
		default:
			stored, err = c.overrides.Update(ctx, name, b, rev)
		}
		if err == nil {
			return next, stored, nil
		}
		if !conflict(err) {
			return policies.Patch{}, 0, err
		}
		if err := ctx.Err(); err != nil {
			return policies.Patch{}, 0, err
		}
	}
}

// conflict reports whether err says the entry changed since it was read.
func conflict(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) ||
		errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// DeleteOverride takes policy name back to its policy file on every
// shaper: it stores no override ({}) and returns its revision.
func (c *Cluster) DeleteOverride(ctx context.Context, name string) (uint64, error) {
	return c.overrides.Put(ctx, name, []byte("{}"))
}
