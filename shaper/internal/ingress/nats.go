package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/internal/logevery"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

// natsIngress takes submissions by NATS request on <subject>.<policy>.<key
// token>, in a queue group so that several shapers share them.
//
// It is pipelined: the subscription's callback runs each submission through
// its gate's Reserve and sends a job that may be stored to JetStream without
// waiting (queue.AdmitAsync); one goroutine takes the answers in order,
// settles them and replies. A stream of requests thus shares the
// connection's writes and JetStream's acks, instead of a goroutine and a
// round trip each. Submissions that must block (an admission limit held in
// Redis, a deferral) run on their own goroutine, at most
// Config.BlockingWorkers at a time.
type natsIngress struct {
	in      *Ingress
	nc      *nats.Conn
	root    string
	sub     *nats.Subscription
	pending chan pendingSubmit
	queued  atomic.Int64  // submissions sent to pending and not yet answered
	quit    chan struct{} // closed by stop: the goroutine replying to pending ends
	slow    chan struct{} // semaphore of the blocking submissions
	running atomic.Int64  // blocking submissions not yet answered
	refused logevery.Limiter
}

type pendingSubmit struct {
	ctx   context.Context // the submission's, with its span
	m     *nats.Msg
	sub   submission
	g     *admission.Gate
	res   admission.Reservation
	p     *queue.Pending
	span  submitSpan
	store trace.Span // storing the job (admission.StoreSpan)
}

// pipelineDepth is how many submissions may wait for JetStream's answer at
// once; the subscription buffers the rest.
const pipelineDepth = 4096

// PipelineDepth is the jetstream.WithPublishAsyncMaxPending the NATS
// ingress needs of the JetStream its queues publish through.
const PipelineDepth = pipelineDepth

// backlogBytes bounds the submissions the subscription holds unread; past
// it they are dropped unanswered (the producer's request times out).
const backlogBytes = 256 << 20

// Subscribe starts the NATS ingress on nc. The raw key may also come in the
// Shaper-Key header (it must then encode to the subject's token).
func (in *Ingress) Subscribe(nc *nats.Conn) error {
	n := &natsIngress{
		in:      in,
		nc:      nc,
		root:    in.cfg.Subject + ".",
		pending: make(chan pendingSubmit, pipelineDepth),
		quit:    make(chan struct{}),
		slow:    make(chan struct{}, in.cfg.BlockingWorkers),
	}
	sub, err := nc.QueueSubscribe(n.root+">", "shaper", n.receive)
	if err != nil {
		return fmt.Errorf("subscribe %s>: %w", n.root, err)
	}
	sub.SetPendingLimits(-1, backlogBytes)
	// Subscribe only queues the interest: make sure the server has it before
	// the shaper says it is ready, or the first requests find no responders.
	if err := nc.FlushTimeout(in.cfg.Timeout); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("subscribe %s>: %w", n.root, err)
	}
	n.sub = sub
	in.nats = n
	go n.reap()
	return nil
}

// receive is the subscription's callback: one message at a time, in order.
func (n *natsIngress) receive(m *nats.Msg) {
	if m.Reply != "" && !replyAllowed(m.Reply) {
		// The shaper would publish its answer there with its own rights:
		// a job into a queue stream (a tour's was stored, passing
		// admission), a JetStream API request. Neither stored nor answered.
		if ok, left := n.refused.Allow(time.Now(), time.Minute); ok {
			n.in.log.Warn("nats submission dropped: its reply subject is JetStream's or the shaper's own", "subject", m.Subject, "reply", m.Reply, "dropped_since_last", left)
		}
		return
	}
	sub, a, ok := n.submission(m)
	if !ok {
		policy, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, n.root), ".")
		n.reply(m, n.in.refusedEarly(context.Background(), jobtrace.Carrier(m.Header), submission{policy: policy}, transportNATS, a))
		return
	}
	ctx, span := n.in.tel.begin(context.Background(), jobtrace.Carrier(m.Header), &sub, transportNATS)
	g, q, a, ok := n.in.gate(sub)
	if !ok {
		n.answer(m, span, a, false)
		return
	}
	res := g.Reserve(sub.request(), span.start)
	switch res.Step {
	case admission.Decided:
		n.answer(m, span, answerOf(sub, res.Decision), true)
	case admission.Block:
		n.block(m, span, func() answer {
			a, _ := n.in.submit(ctx, sub, time.Now())
			return a
		})
	default: // StoreJob
		ps := pendingSubmit{ctx: ctx, m: m, sub: sub, g: g, res: res, p: q.AdmitAsync(res.Job), span: span, store: admission.StoreSpan(ctx)}
		n.queued.Add(1)
		select {
		case n.pending <- ps:
		case <-n.quit: // the replying goroutine is gone (shutdown): answer here
			n.queued.Add(-1)
			n.settle(ps)
		}
	}
}

// reap replies to the pipelined submissions as JetStream answers them.
func (n *natsIngress) reap() {
	for {
		var ps pendingSubmit
		select {
		case ps = <-n.pending:
		case <-n.quit:
			return
		}
		n.settle(ps)
		n.queued.Add(-1)
	}
}

// settle waits for JetStream's answer to ps and replies with the decision,
// on a goroutine of its own when settling blocks (a deferral).
func (n *natsIngress) settle(ps pendingSubmit) {
	rec, err := ps.p.Wait()
	admission.EndStore(ps.store, rec, err)
	answer := func() answer { return answerOf(ps.sub, ps.g.Settle(ps.ctx, &ps.res, rec, err)) }
	if ps.res.SettleBlocks(err) {
		n.block(ps.m, ps.span, answer)
		return
	}
	n.answer(ps.m, ps.span, answer(), true)
}

// block runs answer on a goroutine of its own (it may wait on the network)
// and replies with what it returns.
func (n *natsIngress) block(m *nats.Msg, span submitSpan, answer func() answer) {
	n.slow <- struct{}{}
	n.running.Add(1)
	go func() {
		defer func() {
			n.running.Add(-1)
			<-n.slow
		}()
		n.answer(m, span, answer(), true)
	}()
}

// answer replies a to m and ends the submission's telemetry (known: a
// gate decided).
func (n *natsIngress) answer(m *nats.Msg, span submitSpan, a answer, known bool) {
	n.in.tel.end(span, a, known)
	n.reply(m, a)
}

func (n *natsIngress) reply(m *nats.Msg, a answer) {
	if m.Reply == "" {
		return
	}
	if a.Status == "" {
		a.Status = statusError
	}
	b, _ := json.Marshal(a)
	if err := m.Respond(b); err != nil {
		n.in.log.Debug("nats ingress reply", "err", err)
	}
}

// stop stops taking submissions and waits, at most until ctx ends, for the
// ones taken to be answered. With the connection down it does not wait for
// the subscription to drain (that needs the server); the pipeline still
// empties within the admission timeout, as JetStream's answers time out.
func (n *natsIngress) stop(ctx context.Context) {
	wait := func(done func() bool, what string) {
		for !done() {
			select {
			case <-ctx.Done():
				n.in.log.Warn("nats ingress: " + what + " at shutdown")
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	if n.nc.Status() == nats.CONNECTED {
		if err := n.sub.Drain(); err != nil {
			n.in.log.Warn("nats ingress drain", "err", err)
		}
		wait(func() bool { return !n.sub.IsValid() || n.nc.Status() != nats.CONNECTED }, "submissions still arriving")
	} else {
		n.sub.Unsubscribe()
	}
	wait(func() bool { return n.queued.Load() == 0 }, "JetStream answers still missing")
	close(n.quit)
	wait(func() bool { return n.running.Load() == 0 }, "blocking submissions still running")
}

// Stop stops the NATS ingress (if it was subscribed): no new submissions,
// and those taken are answered, waiting at most until ctx ends.
func (in *Ingress) Stop(ctx context.Context) {
	if in.nats != nil {
		in.nats.stop(ctx)
	}
}

// NATSStats are the NATS ingress's figures.
type NATSStats struct {
	Pending  int64 // submissions sent to JetStream and not yet answered
	Blocking int64 // submissions running on a goroutine of their own
	Backlog  int64 // submissions received and not yet looked at
	Dropped  int64 // submissions dropped unanswered, the backlog being full
}

// NATSStats returns the NATS ingress's figures; ok false before Subscribe.
func (in *Ingress) NATSStats() (NATSStats, bool) {
	n := in.nats
	if n == nil {
		return NATSStats{}, false
	}
	backlog, _, _ := n.sub.Pending()
	dropped, _ := n.sub.Dropped()
	return NATSStats{Pending: n.queued.Load(), Blocking: n.running.Load(), Backlog: int64(max(backlog, 0)), Dropped: int64(max(dropped, 0))}, true
}

// submission reads a NATS submission: policy and key from the subject (or
// the key from Shaper-Key), payload, Idempotency-Key and traceparent.
func (n *natsIngress) submission(m *nats.Msg) (submission, answer, bool) {
	rest := strings.TrimPrefix(m.Subject, n.root)
	policy, token, ok := strings.Cut(rest, ".")
	if !ok || token == "" || strings.Contains(token, ".") {
		detail := "bad subject " + httpapi.Quote(m.Subject) + ": want " + n.root + "<policy>.<key>"
		if strings.Contains(token, ".") {
			// A key with a dot (or any byte outside [A-Za-z0-9_-]) goes as
			// one token: say which.
			if enc, err := queue.EncodeKey(token); err == nil {
				detail += ", a key of other bytes than [A-Za-z0-9_-] as one token: key " + httpapi.Quote(token) + " is " + n.root + policy + "." + enc +
					" (queue.EncodeKey in Go; the client package does it)"
			}
		}
		return submission{}, failed(400, detail), false
	}
	if vs, given := m.Header[queue.HeaderKey]; given && (len(vs) != 1 || vs[0] == "") {
		// Only the first of two was checked, and an empty one read as none.
		return submission{}, failed(400, "the Shaper-Key header, when given, holds one value: the raw key its subject's token encodes"), false
	}
	key := m.Header.Get(queue.HeaderKey)
	if key == "" {
		var err error
		if key, err = queue.DecodeKey(token); err != nil {
			detail := err.Error()
			if enc, e := queue.EncodeKey(token); e == nil && enc != token {
				detail += ": key " + httpapi.Quote(token) + " is " + n.root + policy + "." + enc
			}
			return submission{}, failed(400, detail), false
		}
	} else if enc, err := queue.EncodeKey(key); err != nil {
		return submission{}, failed(400, err.Error()), false
	} else if enc != token {
		return submission{}, failed(400, "the Shaper-Key header "+httpapi.Quote(key)+" does not match the subject's key token "+httpapi.Quote(token)+
			": that key's subject is "+n.root+policy+"."+enc), false
	}
	return submission{
		policy:      policy,
		key:         key,
		payload:     m.Data,
		idempotency: m.Header.Get("Idempotency-Key"),
	}, answer{}, true
}

// replyAllowed reports whether the shaper may answer a submission on
// reply: not on a subject of the server's own ($JS.API, $KV, $SYS, …) or
// the shaper's (shaper.q, shaper.out, shaper.jobs, _shaper.answers, …),
// where its answer would be a stored job, a delivery or an API request
// made with the shaper's rights.
func replyAllowed(reply string) bool {
	return !strings.HasPrefix(reply, "$") && !strings.HasPrefix(reply, "shaper.") && !strings.HasPrefix(reply, "_shaper.")
}
