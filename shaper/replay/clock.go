package replay

import (
	"sync/atomic"
	"time"

	"github.com/shaper-dev/shaper/drain"
)

// clock is the virtual clock of one replay: the drainers, the queues and
// the gate read it; the replay moves it from event to event.
type clock struct {
	now atomic.Int64 // Unix nanoseconds
}

var _ drain.Clock = (*clock)(nil)

func (c *clock) Now() time.Time  { return time.Unix(0, c.now.Load()) }
func (c *clock) set(t time.Time) { c.now.Store(t.UnixNano()) }
func (c *clock) unixNano() int64 { return c.now.Load() }

// NewTimer implements drain.Clock. A driven Drainer never asks for a timer:
// if one did, the replay would hang instead of answering, so it stops here.
func (c *clock) NewTimer(time.Duration) drain.Timer {
	panic("replay: a driven drainer asked for a timer")
}
