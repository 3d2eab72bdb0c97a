package shaper

import (
	"context"
	"fmt"
	"strconv"

	"github.com/shaper-dev/shaper/queue"
)

// keepReserve starts sampling JetStream's storage for the Reserve that
// keeps jobs from filling it (queue.Reserve): once, before any job is
// admitted, then every queue.ReserveEvery until runCtx ends. It logs what
// it found: the limit and the room kept, or that no limit is visible.
func (s *Shaper) keepReserve(ctx, runCtx context.Context) {
	used, limit, err := s.storeUse(ctx)
	if err == nil {
		s.reserve.Sample(used, limit)
	}
	switch {
	case err != nil:
		s.log.Warn("jetstream storage: its use cannot be read, so none is kept from jobs for the drain until it can (read again every 250 ms)", "err", err)
	case limit > 0:
		keep := queue.ReserveFor(limit)
		source := "the account's JetStream limit"
		switch {
		case s.srv != nil && s.cfg.MaxStore > 0:
			source = "--max-store"
		case s.srv != nil:
			source = "3/4 of the disk free at start; --max-store sets it"
		}
		attrs := []any{"used", queue.FormatBytes(used), "limit", queue.FormatBytes(limit), "limit_from", source, "kept", queue.FormatBytes(keep)}
		if free, ok := diskFree(s.cfg.DataDir); ok && s.srv != nil && limit > used+free {
			s.log.Warn("jetstream storage: its limit is more than the disk has free: the disk fills first, and a full disk fails writes without an answer; lower --max-store", append(attrs, "disk_free", queue.FormatBytes(free))...)
		}
		msg := fmt.Sprintf("jetstream storage: up to %s, of which the last %s is kept for the shapers' own writes (lease renewals, membership, job records): jobs are refused (503) past %s",
			queue.FormatBytes(limit), queue.FormatBytes(keep), queue.FormatBytes(limit-keep))
		if used >= limit-keep {
			s.log.Warn(msg+"; it holds that already: jobs are refused until the drain frees room", attrs...)
		} else {
			s.log.Info(msg, attrs...)
		}
	default:
		s.log.Warn("jetstream storage: the account has no storage limit a client can see, so none is kept for the drain: give the account a JetStream limit (max_file) below the server's max_file_store, or jobs that fill the server's storage stop the drain's lease renewals too")
	}
	s.background.Go(func() { s.reserve.Run(runCtx, s.storeUse) })
}

// storeUse returns what this shaper's JetStream account stores and the
// limit it stores it under: the account's own, else, on the embedded
// server, the server's (max_file_store: 3/4 of the disk free at its start
// by default, or Config.MaxStore), else 0 (unknown). With limits per
// replica count (tiers), the tier of the shaper's replicas.
func (s *Shaper) storeUse(ctx context.Context) (used, limit int64, err error) {
	ai, err := s.js.AccountInfo(ctx)
	if err != nil {
		return 0, 0, err
	}
	used, limit = int64(ai.Store), ai.Limits.MaxStore
	if t, ok := ai.Tiers["R"+strconv.Itoa(max(s.cfg.Replicas, 1))]; limit <= 0 && ok && t.Limits.MaxStore > 0 {
		used, limit = int64(t.Store), t.Limits.MaxStore
	}
	if limit <= 0 && s.srv != nil {
		if c := s.srv.JetStreamConfig(); c != nil {
			limit = c.MaxStore
		}
	}
	if limit <= 0 {
		return used, 0, nil
	}
	return used, limit, nil
}

// maxStoreError is the ConfigError of a MaxStore that cannot be used.
func maxStoreError(c Config) error {
	switch {
	case c.MaxStore < 0:
		return &ConfigError{Field: "MaxStore", Err: fmt.Errorf("%d bytes: want a positive size, or 0 for 3/4 of the disk free at start", c.MaxStore)}
	case c.MaxStore > 0 && c.NATSURL != "":
		return &ConfigError{Field: "MaxStore", Err: fmt.Errorf("applies to the embedded JetStream only: with an external server, give the shapers' account a JetStream limit (max_file) on the server")}
	case c.MaxStore > 0 && c.MaxStore < 1<<20:
		return &ConfigError{Field: "MaxStore", Err: fmt.Errorf("%s: want at least 1 MiB", queue.FormatBytes(c.MaxStore))}
	}
	return nil
}
