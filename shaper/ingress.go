package shaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/queue"
)

// ingress takes submissions by NATS request on <submit subject>.<policy>.<key
// token>, in a queue group so that several shapers share them.
//
// It is pipelined: the subscription's callback checks each submission and
// sends its job to JetStream without waiting (queue.AdmitAsync); one
// goroutine takes the answers in order and replies. A stream of requests
// thus shares the connection's writes and JetStream's acks, instead of a
// goroutine and a round trip each. Submissions that must block first (an
// admission limit held in Redis, a deferral) run on their own goroutine, at
// most DefaultIngressWorkers at a time.
type ingress struct {
	s       *Shaper
	root    string
	sub     *nats.Subscription
	pending chan pendingSubmit
	queued  atomic.Int64  // submissions sent to pending and not yet answered
	quit    chan struct{} // closed by stop: the goroutine replying to pending ends
	slow    chan struct{} // semaphore of the blocking submissions
	running atomic.Int64  // blocking submissions not yet answered
}

type pendingSubmit struct {
	m *nats.Msg
	t *ticket
	p *queue.Pending
}

// ingressPipeline is how many submissions may wait for JetStream's answer
// at once; the subscription buffers the rest.
const ingressPipeline = 4096

// subscribeIngress starts the NATS ingress. The raw key may also come in
// the Shaper-Key header (it must then encode to the token).
func (s *Shaper) subscribeIngress() (*ingress, error) {
	in := &ingress{
		s:       s,
		root:    s.cfg.SubmitSubject + ".",
		pending: make(chan pendingSubmit, ingressPipeline),
		quit:    make(chan struct{}),
		slow:    make(chan struct{}, DefaultIngressWorkers),
	}
	sub, err := s.nc.QueueSubscribe(in.root+">", "shaper", in.receive)
	if err != nil {
		return nil, fmt.Errorf("shaper: subscribe %s>: %w", in.root, err)
	}
	sub.SetPendingLimits(-1, 256<<20)
	// Subscribe only queues the interest: make sure the server has it before
	// the shaper says it is ready, or the first requests find no responders.
	if err := s.nc.FlushTimeout(s.cfg.Timeout); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("shaper: subscribe %s>: %w", in.root, err)
	}
	in.sub = sub
	go in.reap()
	return in, nil
}

// receive is the subscription's callback: one message at a time, in order.
func (in *ingress) receive(m *nats.Msg) {
	ctx := context.Background()
	sub, o, ok := in.submission(m)
	if !ok {
		in.reply(m, o)
		return
	}
	t, o := in.s.check(ctx, sub, false)
	switch {
	case t == nil:
		in.reply(m, o)
	case t.slow:
		in.block(m, func() outcome { return in.s.submit(ctx, sub) })
	case t.err != nil:
		// Known to be full without asking JetStream, and not a defer policy
		// (check marks that slow): answering does not block.
		in.reply(m, in.s.settle(ctx, t, queue.Receipt{}, t.err))
	default:
		ps := pendingSubmit{m: m, t: t, p: t.rt.q.AdmitAsync(t.job)}
		in.queued.Add(1)
		select {
		case in.pending <- ps:
		case <-in.quit: // the replying goroutine is gone (shutdown): answer here
			in.queued.Add(-1)
			rec, err := ps.p.Wait()
			in.reply(m, in.s.settle(ctx, t, rec, err))
		}
	}
}

// reap replies to the pipelined submissions as JetStream answers them.
func (in *ingress) reap() {
	ctx := context.Background()
	for {
		var ps pendingSubmit
		select {
		case ps = <-in.pending:
		case <-in.quit:
			return
		}
		rec, err := ps.p.Wait()
		if errors.Is(err, queue.ErrFull) && ps.t.defers {
			in.block(ps.m, func() outcome { return in.s.settle(ctx, ps.t, rec, err) })
		} else {
			in.reply(ps.m, in.s.settle(ctx, ps.t, rec, err))
		}
		in.queued.Add(-1)
	}
}

// block runs answer on a goroutine of its own (it may wait on the network)
// and replies with what it returns.
func (in *ingress) block(m *nats.Msg, answer func() outcome) {
	in.slow <- struct{}{}
	in.running.Add(1)
	go func() {
		defer func() {
			in.running.Add(-1)
			<-in.slow
		}()
		in.reply(m, answer())
	}()
}

// backlog is how many submissions the subscription holds that the
// callback has not taken yet.
func (in *ingress) backlog() int64 {
	n, _, _ := in.sub.Pending()
	return int64(max(n, 0))
}

// dropped is how many submissions the subscription dropped as a slow
// consumer (its backlog at its limit).
func (in *ingress) dropped() int64 {
	n, _ := in.sub.Dropped()
	return int64(max(n, 0))
}

func (in *ingress) reply(m *nats.Msg, o outcome) {
	if m.Reply == "" {
		return
	}
	if o.Status == "" {
		o.Status = statusError
	}
	b, _ := json.Marshal(o)
	if err := m.Respond(b); err != nil {
		in.s.log.Debug("nats ingress reply", "err", err)
	}
}

// stop stops taking submissions and waits, at most until ctx ends, for the
// ones taken to be answered. With the connection down it does not wait for
// the subscription to drain (that needs the server); the pipeline still
// empties within the admission timeout, as JetStream's answers time out.
func (in *ingress) stop(ctx context.Context) {
	wait := func(done func() bool, what string) {
		for !done() {
			select {
			case <-ctx.Done():
				in.s.log.Warn("nats ingress: " + what + " at shutdown")
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	if in.s.nc.Status() == nats.CONNECTED {
		if err := in.sub.Drain(); err != nil {
			in.s.log.Warn("nats ingress drain", "err", err)
		}
		wait(func() bool { return !in.sub.IsValid() || in.s.nc.Status() != nats.CONNECTED }, "submissions still arriving")
	} else {
		in.sub.Unsubscribe()
	}
	wait(func() bool { return in.queued.Load() == 0 }, "JetStream answers still missing")
	close(in.quit)
	wait(func() bool { return in.running.Load() == 0 }, "blocking submissions still running")
}

// submission reads a NATS submission: policy and key from the subject (or
// the key from Shaper-Key), payload, Idempotency-Key and traceparent.
func (in *ingress) submission(m *nats.Msg) (submission, outcome, bool) {
	rest := strings.TrimPrefix(m.Subject, in.root)
	policy, token, ok := strings.Cut(rest, ".")
	if !ok || token == "" || strings.Contains(token, ".") {
		return submission{}, failed(400, "bad subject "+quote(m.Subject)+": want "+in.root+"<policy>.<key>"), false
	}
	key := m.Header.Get(queue.HeaderKey)
	if key == "" {
		var err error
		if key, err = queue.DecodeKey(token); err != nil {
			return submission{}, failed(400, err.Error()), false
		}
	} else if enc, err := queue.EncodeKey(key); err != nil {
		return submission{}, failed(400, err.Error()), false
	} else if enc != token {
		return submission{}, failed(400, "Shaper-Key header does not match the subject's key token "+quote(token)+" (want "+quote(enc)+")"), false
	}
	return submission{
		policy:      policy,
		key:         key,
		payload:     m.Data,
		idempotency: m.Header.Get("Idempotency-Key"),
		traceparent: m.Header.Get(queue.HeaderTrace),
	}, outcome{}, true
}
