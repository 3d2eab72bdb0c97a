package admission

import (
	"log/slog"
	"time"

	"github.com/shaper-dev/shaper/internal/logevery"
)

// failures logs the store's failures of admissions at most once a second,
// with how many came since the last line: while JetStream elects a leader
// every submission fails (a tour counted 236 lines in 7 s).
type failures struct{ every logevery.Limiter }

func (f *failures) log(log *slog.Logger, err error, now time.Time) {
	ok, left := f.every.Allow(now, time.Second)
	switch {
	case !ok:
	case left > 0:
		log.Warn("admission failed", "err", err, "not_logged_since_last", left)
	default:
		log.Warn("admission failed", "err", err)
	}
}
