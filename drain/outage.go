package drain

import (
	"context"
	"errors"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// While a queue does not answer (a JetStream stream electing a leader),
// every read and removal waits out its timeout and fails, and its key tries
// again retryRead later: left at that, a drain resumes up to a timeout and
// a pause after the queue is back. Instead, the first call that fails as
// unavailable starts a probe, which asks the queue for its last sequence
// every probeEvery, each ask bounded by probeTimeout, without waiting for
// the one before: the moment one is answered, the calls still in flight
// are cancelled (their keys try again at once) and every key waiting to
// retry a failed call falls due. Only a started Drainer probes; a driven
// one retries after retryRead.
const (
	probeEvery   = 200 * time.Millisecond
	probeTimeout = time.Second
)

// retryOf says which of a key's times wait to retry a failed queue call,
// so that the queue's return can bring them forward.
type retryOf uint8

const (
	retryHeld  retryOf = 1 << iota // next: a job held back because the slots before it were not freed
	retryDead                      // a dead letter's due, after its removal failed
	retryFetch                     // fetchAt: the head's read
	retryFree                      // pendingAt: the freeing of delivered slots
)

// queueCalls is the context the queue calls of a started Drainer's steps
// run with, renewed (and the old one cancelled) when the queue answers
// again after failing. Guarded by the Drainer's mu.
type queueCalls struct {
	parent context.Context
	ctx    context.Context // nil: the step's own
	cancel context.CancelFunc
	gen    uint64    // counts renewals: a step of an older one began before the queue came back
	outage bool      // a call failed as unavailable and a probe runs
	since  time.Time // when the outage began
}

func (c *queueCalls) start(parent context.Context) {
	c.parent = parent
	c.renew()
}

func (c *queueCalls) renew() {
	if c.cancel != nil {
		c.cancel()
	}
	c.ctx, c.cancel = context.WithCancel(c.parent)
	c.gen++
}

// queueCtx returns the context of s's queue calls.
func (s *step) queueCtx(ctx context.Context) context.Context {
	if s.qctx != nil {
		return s.qctx
	}
	return ctx
}

// unavailable reports whether any of s's queue calls failed because the
// queue did not answer.
func (s *step) unavailable() bool {
	for _, err := range []error{s.removeErr, s.readErr, s.deadErr} {
		if errors.Is(err, queue.ErrUnavailable) {
			return true
		}
	}
	return false
}

// queueFailed starts a probe of the queue unless one runs. d.mu must be
// held.
func (d *Drainer) queueFailed(now time.Time) {
	if d.calls.outage || d.mode != modeStarted || d.calls.ctx == nil {
		return
	}
	d.calls.outage, d.calls.since = true, now
	ctx := d.calls.parent
	d.wg.Go(func() { d.probe(ctx) })
}

// probe asks the queue every probeEvery whether it answers again, until
// one ask is answered or ctx ends.
func (d *Drainer) probe(ctx context.Context) {
	back := make(chan struct{}, 1)
	tick := d.clock.NewTimer(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-back:
			d.queueBack()
			return
		case <-tick.C():
		}
		d.wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			if _, err := d.q.LastSeq(pctx); err == nil {
				select {
				case back <- struct{}{}:
				default:
				}
			}
		})
		tick.Reset(probeEvery)
	}
}

// queueBack ends an outage: the queue calls in flight are cancelled, and
// every key waiting to retry a failed call falls due now.
func (d *Drainer) queueBack() {
	d.mu.Lock()
	if !d.calls.outage {
		d.mu.Unlock()
		return
	}
	now := d.clock.Now()
	d.calls.outage = false
	d.calls.renew()
	for _, k := range d.keys {
		if k.retry == 0 || k.busy {
			continue
		}
		if k.retry&retryHeld != 0 && k.next.time().After(now) {
			k.next = instantOf(now)
		}
		if k.retry&retryDead != 0 {
			for i := headJob; i < len(k.aside); i++ {
				if t := k.job(i); t.waitsDead() && t.due.After(now) {
					t.due = now
				}
			}
		}
		if k.retry&retryFetch != 0 && k.fetchAt.time().After(now) {
			k.fetchAt = instantOf(now)
		}
		if k.retry&retryFree != 0 && k.pendingAt.time().After(now) {
			k.pendingAt = instantOf(now)
		}
		k.retry = 0
		d.place(k, now)
	}
	down := now.Sub(d.calls.since)
	d.mu.Unlock()
	d.wakeScheduler()
	d.log.Info("drain: the queue answers again", "after", down.Round(time.Millisecond))
}
