package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/drain/downstream"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/pipeline"
	"github.com/shaper-dev/shaper/shaper/internal/recording"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

// Source opens a trace from its start. Every candidate reads the trace once,
// through its own reader, as a stream.
type Source func() (io.ReadCloser, error)

// Result is what a replay of a trace under one policy found.
type Result struct {
	// Policy is the policy replayed.
	Policy policies.Policy
	// Span is the trace's length: the time of its last submission.
	Span time.Duration
	// Submitted counts the trace's submissions; the rest count what the
	// shaper answered them (Accepted + Rejected + Deferred + Limited +
	// Unavailable + Invalid = Submitted).
	Submitted   uint64
	Accepted    uint64
	Rejected    uint64 // the key's queue full, the job not kept (429)
	Deferred    uint64 // the key's queue full, the job kept (overflow: defer)
	Limited     uint64 // refused by the admission limit
	Unavailable uint64
	Invalid     uint64
	// Readmitted counts deferred jobs put back into their queue; Dead the
	// jobs dead-lettered (out of attempts or past their deadline, deferred
	// or delivered); Delivered the jobs delivered, the trace drained to the
	// end; Failed the delivery attempts the downstream failed
	// (Config.Downstream), each retried or dead-lettered.
	Readmitted uint64
	Dead       uint64
	Delivered  uint64
	Failed     uint64
	// Wait is the time in queue of the delivered jobs, from submission to
	// their successful delivery (a deferred job's includes its time
	// deferred, a retried job's its failed attempts).
	Wait Wait
	// DeepestQueue is the most jobs one key held.
	DeepestQueue int64
	// PeakKey and PeakTotal are the most deliveries in any one second, of
	// one key and over all keys: what the downstream saw at worst.
	PeakKey   int
	PeakTotal int
	// Recorded counts the submissions whose outcome the trace recorded;
	// Agreed those the replay decided the same way.
	Recorded uint64
	Agreed   uint64
	// Series is the replay over the trace's time, when Config.Series asked.
	Series *Series
	// Derived says the candidate was not replayed: a smaller queue of the
	// same outflow and total refused nothing, so this one does the same
	// (see RunAll).
	Derived bool
}

// RejectedShare returns the share of submissions refused and not kept
// (Rejected / Submitted), 0 for an empty trace.
func (r *Result) RejectedShare() float64 { return share(r.Rejected, r.Submitted) }

// LimitedShare returns Limited / Submitted.
func (r *Result) LimitedShare() float64 { return share(r.Limited, r.Submitted) }

// InvalidShare returns Invalid / Submitted.
func (r *Result) InvalidShare() float64 { return share(r.Invalid, r.Submitted) }

// DeferredShare returns Deferred / Submitted.
func (r *Result) DeferredShare() float64 { return share(r.Deferred, r.Submitted) }

func share(n, of uint64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// Wait summarises times in queue.
type Wait struct {
	P50, P99, Max time.Duration
}

// origin is the virtual instant a trace starts at.
var origin = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// sweepEvery is how often, in trace time, the gate forgets idle keys (as
// the shaper sweeps its gates every 10 s), and the replay the delivery
// windows of keys idle for a second.
const sweepEvery = 10 * time.Second

// replay is one policy's replay: the shaper's own pipeline (admission
// gate and drainers, assembled by pipeline.New) over in-memory queues,
// driven on a virtual clock.
type replay struct {
	ctx        context.Context
	clock      *clock
	line       *pipeline.Pipeline
	down       Downstream
	sim        *downstream.Downstream // the simulated downstream (Downstream.Model), nil for none
	payload    []byte                 // shared by every job: only its length matters
	maxPayload int

	res       Result
	waits     histogram
	keys      map[string]*window // deliveries per key in the last second
	total     window
	series    *Series
	nextSweep time.Time
}

// Run replays the trace src opens under policy p and returns what it found.
// It reads the trace once, as a stream: its memory grows with the keys and
// their queues, not with the trace's length.
func Run(ctx context.Context, p policies.Policy, src Source, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Downstream.check(); err != nil {
		return Result{}, err
	}
	rc, err := src()
	if err != nil {
		return Result{}, fmt.Errorf("replay: open trace: %w", err)
	}
	defer rc.Close()
	r, err := newReplay(ctx, p, cfg)
	if err != nil {
		return Result{}, err
	}
	defer r.stop()
	tr := traffic.NewReader(rc)
	for {
		rec, err := tr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Result{}, fmt.Errorf("replay: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		r.submit(rec)
	}
	if err := r.finish(); err != nil {
		return Result{}, err
	}
	return r.result(), nil
}

func newReplay(ctx context.Context, p policies.Policy, cfg Config) (*replay, error) {
	r := &replay{
		ctx:        ctx,
		clock:      &clock{},
		keys:       make(map[string]*window),
		down:       cfg.Downstream,
		maxPayload: cfg.MaxPayload,
		nextSweep:  origin.Add(sweepEvery),
	}
	r.clock.set(origin)
	r.res.Policy = p
	if m := cfg.Downstream.Model; m != nil {
		var err error
		if r.sim, err = downstream.New(r.clock, *m); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
	}
	if cfg.Series {
		r.series = newSeries()
	}
	mcfg := drain.MemQueueConfig{MaxPayload: cfg.MaxPayload, Clock: r.clock}
	q, err := drain.NewMemQueue(p.Name, p.Queue, mcfg)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	deferQ, err := drain.NewMemQueue(p.Name, admission.DeferredSize(p), mcfg)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	// The shaper's own assembly, with a seeded jitter so that a replay is
	// repeatable, and dead letters counted.
	dead := func(context.Context, *queue.Msg, string, []string) error {
		r.res.Dead++
		return nil
	}
	r.line, err = pipeline.New(p, q, deferQ, r, pipeline.Config{
		Clock:           r.clock,
		Jitter:          rand.New(rand.NewPCG(1, 2)).Float64,
		DeadLetter:      dead,
		DeferDeadLetter: dead,
	})
	if err != nil {
		return nil, fmt.Errorf("replay: policy %q: %w", p.Name, err)
	}
	return r, nil
}

func (r *replay) stop() {
	r.line.Drain.Stop()
	r.line.DeferDrain.Stop()
}

// Deliver is the sink of the replay's drainer: it asks the downstream
// model whether it takes the delivery now, and measures each one taken.
func (r *replay) Deliver(_ context.Context, d *drain.Delivery) error {
	now := r.clock.unixNano()
	if err := r.down.deliver(time.Duration(now - origin.UnixNano())); err != nil {
		r.res.Failed++
		return err
	}
	if r.sim != nil {
		if err := r.sim.Deliver(r.ctx, d); err != nil {
			r.res.Failed++
			return err
		}
	}
	wait := time.Duration(now - d.Msg.EnqueuedAt.UnixNano())
	r.res.Delivered++
	r.waits.add(wait)
	w := r.keys[d.Token]
	if w == nil {
		w = new(window)
		r.keys[d.Token] = w
	}
	w.add(now)
	r.res.PeakKey = max(r.res.PeakKey, w.peak)
	r.total.add(now)
	if r.series != nil {
		pt, _ := r.point()
		pt.Deliveries++
		pt.WaitSum += wait
		pt.WaitMax = max(pt.WaitMax, wait)
	}
	return nil
}

// point returns the series' point of the clock's time, sampling the queues
// when it is new.
func (r *replay) point() (*Point, bool) {
	pt, fresh := r.series.at(r.clock.Now().Sub(origin))
	if fresh {
		pt.Queued = r.line.Drain.Stats().Queued
	}
	return pt, fresh
}

// submit runs the drain up to rec's time, and rec through the gate.
func (r *replay) submit(rec traffic.Record) {
	at := origin.Add(rec.At)
	r.until(at)
	r.clock.set(at)
	if r.series != nil {
		r.point()
	}
	d := r.line.Gate.Admit(r.ctx, admission.Request{Key: rec.Key, Payload: r.payloadOf(rec.Size)}, at)
	r.res.Submitted++
	r.res.Span = rec.At
	o := recording.Outcome(d.Outcome)
	switch o {
	case traffic.Accepted:
		r.res.Accepted++
	case traffic.Rejected:
		r.res.Rejected++
	case traffic.Deferred:
		r.res.Deferred++
	case traffic.Limited:
		r.res.Limited++
	case traffic.Unavailable:
		r.res.Unavailable++
	default:
		r.res.Invalid++
	}
	r.res.DeepestQueue = max(r.res.DeepestQueue, d.Queued)
	if rec.Outcome != traffic.Unknown {
		r.res.Recorded++
		if rec.Outcome == o {
			r.res.Agreed++
		}
	}
}

// payloadOf returns a payload of size bytes, or one byte too many for the
// queue when size is larger still: the gate only looks at its length.
func (r *replay) payloadOf(size int) []byte {
	size = min(size, r.maxPayload+1)
	if size > len(r.payload) {
		r.payload = make([]byte, max(size, 2*len(r.payload)))
	}
	return r.payload[:size]
}

// until runs every step of both drainers due before end, moving the clock
// from one to the next; the clock is left at the last step run.
func (r *replay) until(end time.Time) {
	for r.ctx.Err() == nil {
		next, ok := r.step()
		if !ok || next.After(end) {
			return
		}
		r.clock.set(next)
	}
}

// step runs every step due at the clock's time, and returns when the next
// one is due (ok false: none is).
func (r *replay) step() (time.Time, bool) {
	now := r.clock.Now()
	if !now.Before(r.nextSweep) {
		r.sweep(now)
	}
	return r.line.Advance(r.ctx, now)
}

// sweep has the gate forget idle keys, and forgets the delivery windows of
// keys idle for over a second, as the shaper sweeps every 10 s.
func (r *replay) sweep(now time.Time) {
	r.line.Gate.Sweep(now)
	cutoff := now.UnixNano() - int64(time.Second)
	for k, w := range r.keys {
		if w.last() < cutoff {
			delete(r.keys, k)
		}
	}
	r.nextSweep = now.Add(sweepEvery)
}

// finish drains what the trace left queued (and deferred) to the end.
func (r *replay) finish() error {
	for {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		next, ok := r.step()
		if !ok {
			return nil
		}
		r.clock.set(next)
	}
}

func (r *replay) result() Result {
	res := r.res
	res.Readmitted = r.line.Gate.Counts().Readmitted
	res.Wait = Wait{P50: r.waits.quantile(0.50), P99: r.waits.quantile(0.99), Max: r.waits.max}
	res.PeakTotal = r.total.peak
	res.Series = r.series
	return res
}
