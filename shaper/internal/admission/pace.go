package admission

import (
	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
)

// Pace returns how the drainer of p's queue paces: its outflow interval per
// key, its total cap, its retry bounds and budget. The shaper and a replay
// pace with it alike.
func Pace(p policies.Policy) drain.Pace {
	return drain.Pace{
		Interval: p.Outflow.Interval(),
		Total:    p.Total.Interval(),
		Retry: drain.Retry{
			Attempts:   p.Retry.Attempts,
			Backoff:    p.Retry.Backoff,
			MaxBackoff: p.Retry.MaxBackoff,
			Deadline:   p.Retry.Deadline,
			Budget:     p.Retry.Budget.Share(),
		},
	}
}

// DeferPace returns how the drainer of p's deferred jobs paces: as Pace,
// but deferred jobs are re-admitted strictly in order, without a retry
// budget.
func DeferPace(p policies.Policy) drain.Pace {
	pace := Pace(p)
	pace.Retry.Budget = 0
	return pace
}
