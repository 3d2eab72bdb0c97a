package admission

import (
	"log/slog"
	"time"

	"github.com/shaper-dev/shaper/internal/logevery"
)

// failures logs the store's failures of admissions at most once a second,
// with how many came since the last line: while JetStream elects a leader,
// or has no room left, every submission fails (a tour counted 236 lines in
// 7 s).
type failures struct{ every logevery.Limiter }

func (f *failures) log(log *slog.Logger, err error, now time.Time) {
	f.logAs(log, "admission failed", err, now)
}

// logAs is log with the message msg.
func (f *failures) logAs(log *slog.Logger, msg string, err error, now time.Time) {
	ok, left := f.every.Allow(now, time.Second)
	switch {
	case !ok:
	case left > 0:
		log.Warn(msg, "err", err, "not_logged_since_last", left)
	default:
		log.Warn(msg, "err", err)
	}
}
