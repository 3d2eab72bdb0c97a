package drain_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
)

// The log of a failed delivery says when the retry runs: the later of its
// backoff and the key's next slot. At 6/m with a 1 s backoff, every retry
// waits for the slot, 10 s on, and the log says so (it said the backoff).
func TestFailureLogSaysWhenTheRetryRuns(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			var logged testenv.Buffer
			log := slog.New(slog.NewTextHandler(&logged, nil))
			pace := drain.Pace{Interval: 10 * time.Second, Retry: drain.Retry{Attempts: 10, Backoff: time.Second}}
			r := newMemRig(t, 10, pace, drain.Config{Jitter: func() float64 { return 1 }, Logger: log})
			l := newFlightLog(r, 0)
			l.fail = func(d *drain.Delivery) error {
				if d.Msg.Attempt <= 3 {
					return fmt.Errorf("%w: consumer error", drain.ErrDelivery)
				}
				return nil
			}
			r.admit("k", 1)
			r.d.Start(t.Context())
			r.sink.wait(t, 1, 5*time.Minute)

			starts := l.of("k")
			if len(starts) != 4 {
				t.Fatalf("%d attempts, want 4: %+v", len(starts), starts)
			}
			lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("logged %d lines, want one per failure:\n%s", len(lines), strings.Join(lines, "\n"))
			}
			for i, line := range lines {
				gap := starts[i+1].at.Sub(starts[i].at)
				if want := "retry_in=" + gap.String(); !strings.Contains(line, want) {
					t.Errorf("failure %d logged %q; the retry ran %s later, want %s", i+1, line, gap, want)
				}
				if gap < 10*time.Second {
					t.Errorf("retry %d ran %s after the failure, before the key's next slot", i+1, gap)
				}
			}
		})
	})
}

// The failure that ends a job's attempts logs no retry (it logged
// retry_in=0s, and the job was dead-lettered at once): it says the job
// goes to the dead letters, and why.
func TestFailureLogSaysNoRetryAfterTheLast(t *testing.T) {
	noDeadlock(t, func() {
		synctest.Test(t, func(t *testing.T) {
			var logged testenv.Buffer
			log := slog.New(slog.NewTextHandler(&logged, nil))
			dead := make(chan string, 1)
			pace := drain.Pace{Interval: time.Second, Retry: drain.Retry{Attempts: 2, Backoff: time.Second}}
			r := newMemRig(t, 10, pace, drain.Config{Jitter: func() float64 { return 1 }, Logger: log,
				DeadLetter: func(_ context.Context, _ *queue.Msg, reason string, _ []string) error {
					dead <- reason
					return nil
				}})
			l := newFlightLog(r, 0)
			l.fail = func(*drain.Delivery) error { return fmt.Errorf("%w: consumer error", drain.ErrDelivery) }
			r.admit("k", 1)
			r.d.Start(t.Context())
			reason := <-dead
			synctest.Wait()
			lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("logged %d lines, want one per failure:\n%s", len(lines), strings.Join(lines, "\n"))
			}
			if !strings.Contains(lines[0], "retry_in=") {
				t.Errorf("the first failure logged %q, want when its retry runs", lines[0])
			}
			if strings.Contains(lines[1], "retry_in") || !strings.Contains(lines[1], `next="dead letter"`) ||
				!strings.Contains(lines[1], "reason="+reason) {
				t.Errorf("the last failure logged %q, want no retry_in, next=\"dead letter\" and reason=%s", lines[1], reason)
			}
		})
	})
}
