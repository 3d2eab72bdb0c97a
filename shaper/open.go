package shaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
	"github.com/shaper-dev/shaper/shaper/internal/deadletter"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
)

// startError is the error of a start-up step: a ConfigError as it is (it
// names the setting, "shaper: replicas: …"), any other prefixed "shaper:".
func startError(err error) error {
	var ce *ConfigError
	if errors.As(err, &ce) {
		return err
	}
	return fmt.Errorf("shaper: %w", err)
}

// open opens the job records, the cluster's buckets, every policy's
// pipeline and dead letters, applies the stored overrides and starts the
// leases; on an error the caller stops what was started (Run's abort).
func (s *Shaper) open(ctx, runCtx context.Context) error {
	// Creating or binding the stores retries until the start-up deadline
	// or until Run is stopped (a signal during a start-up that keeps
	// retrying ends it); what runs afterwards lives with runCtx.
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.StartTimeout, errStartDeadline)
	defer cancel()
	err := s.retry(ctx, "opening the job records", func(ctx context.Context) (err error) {
		if err := s.settleReplicas(ctx); err != nil {
			return err
		}
		s.jobs, err = jobs.Open(ctx, s.js, jobs.Config{
			TTL:        s.cfg.JobTTL,
			MaxRecords: s.cfg.JobRecords,
			Replicas:   s.cfg.Replicas,
			Logger:     s.log,
		})
		return err
	})
	if err != nil {
		return startError(err)
	}
	err = s.retry(ctx, "opening the leases and overrides", func(ctx context.Context) (err error) {
		s.cluster, err = cluster.Open(ctx, s.js, cluster.Config{
			Instance: s.cfg.InstanceID,
			LeaseTTL: s.cfg.LeaseTTL,
			Replicas: s.cfg.Replicas,
			Logger:   s.log,
		})
		return err
	})
	if err != nil {
		return startError(err)
	}
	s.keepReserve(ctx, runCtx)
	err = s.retry(ctx, "claiming the instance id", func(context.Context) error {
		// Claim waits up to a lease TTL for an earlier holder's entry to
		// expire (a shaper killed on another machine): longer than a
		// try's first bound, which would cut it off with a warning.
		cctx, cancel := context.WithTimeout(ctx, cmp.Or(s.cfg.LeaseTTL, cluster.DefaultLeaseTTL)+startFirstTry)
		defer cancel()
		return s.cluster.Claim(cctx, s.HTTPAddr())
	})
	if err != nil {
		if errors.Is(err, cluster.ErrInstanceInUse) {
			return &ConfigError{Field: "InstanceID", Err: err}
		}
		if queue.StorageFull(err) {
			return fmt.Errorf("shaper: claim instance id: %s, and start again: %w", storageFullHint, err)
		}
		return fmt.Errorf("shaper: claim instance id: %w", err)
	}
	s.dead = deadletter.New(s.js, deadletter.Config{
		Replicas:   s.cfg.Replicas,
		MaxPayload: s.cfg.MaxPayload,
		Logger:     s.log,
		Jobs:       s.jobs,
		Policies:   s.policies.names,
		Replay:     s.ingress.Submit,
		Tracer:     s.tracer,
	})
	s.policies.setDeadCount(s.dead.Count)
	var firsts []<-chan struct{}
	for _, p := range s.cfg.Policies.Policies() {
		first, err := s.serve(runCtx, ctx, p)
		if err != nil {
			return err
		}
		firsts = append(firsts, first)
	}
	var follow func()
	err = s.retry(ctx, "watching the policy overrides", func(context.Context) (err error) {
		follow, err = s.cluster.WatchOverrides(runCtx, func(name string, p *policies.Patch, rev uint64) {
			if err := s.policies.override(runCtx, name, p, rev, s.log); err != nil {
				s.log.Error("policy override not applied", "policy", name, "err", err)
			}
		})
		return err
	})
	if err != nil {
		return startError(err)
	}
	s.starting.at("taking the drain leases")
	s.background.Go(follow)
	s.cluster.SetFileDigests(s.policies.fileDigests)
	s.background.Go(func() { s.cluster.KeepMembership(runCtx) })
	s.background.Go(func() { s.policies.sweep(runCtx) })
	s.background.Go(func() { s.series.Run(runCtx) })
	s.background.Go(func() { s.dead.KeepCounts(runCtx, deadCountInterval) })
	// A lone shaper drains from the moment it is ready.
	for _, first := range firsts {
		<-first
	}
	return nil
}

// settleReplicas sets how many replicas the Shaper's streams and buckets
// keep: when Config.Replicas is 0, as many as the store's job records keep
// (1 on a new store). A count below theirs is refused: start-up updates
// the streams in place, so one shaper started without --replicas would
// lower every stream of the store.
func (s *Shaper) settleReplicas(ctx context.Context) error {
	have := 0
	st, err := s.js.Stream(ctx, jobs.Stream)
	switch {
	case err == nil:
		have = st.CachedInfo().Config.Replicas
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return err
	}
	switch want := s.cfg.Replicas; {
	case want == 0:
		s.cfg.Replicas = max(have, 1)
		if have > 1 {
			s.log.Info("replicas: as many as the store keeps", "replicas", have, "stream", jobs.Stream)
		}
	case want < have:
		return &ConfigError{Field: "Replicas", Err: fmt.Errorf("%d: the shaper's streams on this cluster keep %d replicas (%s), and a shaper does not lower them: "+
			"leave the count unset to keep theirs, or lower every SHAPER_ stream and KV_SHAPER_ bucket first (nats stream edit NAME --replicas %d)", want, have, jobs.Stream, want)}
	}
	return nil
}

// serve opens p's pipeline (retrying until openCtx ends), adds it to the
// policy table and starts holding its drain lease (until runCtx ends or the
// policy is removed). The returned channel is closed once the first
// attempt at the lease is over.
func (s *Shaper) serve(runCtx, openCtx context.Context, p policies.Policy) (<-chan struct{}, error) {
	var line *served
	err := s.retry(openCtx, "opening the streams of policy "+p.Name, func(ctx context.Context) (err error) {
		line, err = s.openPipeline(runCtx, ctx, p)
		return err
	})
	if err == nil {
		// Jobs admitted from now on are within the horizon of job status.
		err = s.retry(openCtx, "marking the job status horizon of policy "+p.Name, func(ctx context.Context) error {
			return s.jobs.Mark(ctx, p.Name, line.queue)
		})
		if err != nil {
			line.stop(context.Background(), s.log)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("shaper: policy %q: %w", p.Name, err)
	}
	lctx, cancel := context.WithCancel(runCtx)
	line.stopLease = cancel
	s.policies.add(p.Name, line)
	first := make(chan struct{})
	held := s.partitionHeld(lctx, p.Name, line)
	s.background.Go(func() {
		s.cluster.HoldPartitions(lctx, p.Name, line.Drain.Partitions(), held, func() { close(first) })
	})
	s.background.Go(func() { s.jobs.KeepHorizon(lctx, p.Name, line.queue) })
	return first, nil
}

// reportShutdown logs every 2 s what a graceful shutdown still waits for,
// until the returned function is called.
func (s *Shaper) reportShutdown() (stop func()) {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			args := []any{"step", s.stopping.String(), "deliveries", s.policies.inFlight()}
			if in, ok := s.ingress.NATSStats(); ok {
				args = append(args, "nats_submissions", in.Pending+in.Blocking)
			}
			s.log.Info("shutting down: still waiting", args...)
		}
	}()
	return func() { close(done) }
}

// partitionHeld returns what a shaper does when it takes or gives up
// partition i of policy name, served by line: it recounts the keys' jobs,
// keeps the pace of the keys the previous holder handed over and their
// places under the total cap (cluster.Handover), starts delivering and
// answers the other shapers' questions about its keys
// (answers.View.Serve); or it stops, frees the
// slots of the jobs it delivered (pipeline.Pipeline.SetPartition), leaves
// its keys' last attempts and slots for the next holder and answers until
// that one does (answers.View.Leave).
// Renewals of a holding only move its bound on.
func (s *Shaper) partitionHeld(ctx context.Context, name string, line *served) func(i int, holding bool, until time.Time) {
	n := line.Drain.Partitions()
	// Each partition's lease calls from a goroutine of its own, so whether
	// it was held is its drainer's state.
	return func(i int, holding bool, until time.Time) {
		lease := cluster.PartitionLease(name, i, n)
		if !holding {
			line.SetPartition(i, false, until)
			since := time.Now().Add(-line.Policy().Outflow.Interval())
			d := line.Drain.Part(i)
			s.cluster.PutHandover(context.WithoutCancel(ctx), lease, cluster.Handover{Last: d.LastStarts(since), Cap: d.CapOrder()})
			// Released, its drainer still knows what the next holder will
			// do (its keys' depths, last attempts and slots under the
			// cap): it answers the questions about them until the next
			// holder does, a lease TTL at most.
			if err := line.answers.Leave(i, s.cfg.LeaseTTL); err != nil {
				s.log.Warn("answers: stop serving a partition", "policy", name, "partition", i, "err", err)
			}
			return
		}
		if !line.Drain.Part(i).Active() { // taken, not renewed
			// Its count of the keys' jobs lacks the previous holder's
			// last removals: read it afresh before delivering and
			// answering.
			line.Drain.Recount(ctx, i)
			h := s.cluster.TakeHandover(ctx, lease)
			line.Drain.Part(i).KeepPace(h.Last)
			line.Drain.Part(i).KeepCapOrder(h.Cap)
		}
		line.SetPartition(i, true, until)
		if err := line.answers.Serve(i, true); err != nil {
			s.log.Warn("answers: serve a partition", "policy", name, "partition", i, "err", err)
		}
	}
}
