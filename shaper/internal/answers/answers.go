// Package answers makes every shaper answer producers from the schedule of
// the drainer that delivers the key: the holder of the key's partition.
//
// A policy drained in partitions (drain.Group) has, on every shaper, one
// Drainer per partition, but only the holder of a partition's lease
// delivers its keys; the others watch its jobs stored and count them, and
// know neither when each key last started an attempt, nor which jobs were
// delivered and wait for their removal, nor the slots reserved under the
// total cap. An answer read from such a passive drainer is a second model
// of the schedule, and it drifts (by a slot or more, measured by
// TestPartitionedAnswers in integration). A View asks the holder instead:
// each shaper answers, over NATS request/reply, the questions about the
// partitions it delivers (Serve), and asks the holder about the others.
// When no holder answers (a holder just killed, a slow reply) the View
// answers from its own passive drainer; a graceful hand-over leaves no
// partition without an answer (Leave).
package answers

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/drain"
)

// DefaultTimeout bounds how long a View waits for the holder's answer
// before it answers from its own drainer.
const DefaultTimeout = 100 * time.Millisecond

// Config holds a View's optional settings; the zero value means
// DefaultTimeout, no logs and a sink that never waits for a consumer.
type Config struct {
	// Timeout bounds the wait for a holder's answer. Default DefaultTimeout.
	Timeout time.Duration
	// Logger receives the failures of serving answers. Default: discard.
	Logger *slog.Logger
	// Waiting returns since when the deliveries of this shaper's sink of
	// the policy have found no consumer to take them, the zero time when
	// the last was taken (drain.NATSSink.Waiting). Default: never, as for
	// a sink that has no consumers to wait for (a webhook).
	Waiting func() time.Time
}

// View answers, for one policy drained in partitions, what admission asks
// the drain (admission.View): from the local drainer of a key's partition
// when this shaper delivers it, else from the partition's holder, else
// from the local (passive) drainer. It is safe for concurrent use.
type View struct {
	nc      *nats.Conn
	root    string // subject root of the policy's questions: root.<partition>
	g       *drain.Group
	timeout time.Duration
	log     *slog.Logger
	waiting func() time.Time

	mu        sync.Mutex
	subs      []*nats.Subscription // by partition, while this shaper serves it
	leaving   []*leave             // by partition, while it waits for its next holder (Leave)
	recounted []time.Time          // by partition, when a fallback last recounted it
}

// recountEvery bounds how often a View recounts a partition whose holder
// does not answer, before answering from its passive drainer.
const recountEvery = 250 * time.Millisecond

// New returns the View of policy's group g, asking and answering over nc.
func New(nc *nats.Conn, policy string, g *drain.Group, cfg Config) *View {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Waiting == nil {
		cfg.Waiting = func() time.Time { return time.Time{} }
	}
	return &View{
		nc: nc, root: Subject(policy, g.Partitions()), g: g, timeout: cfg.Timeout, waiting: cfg.Waiting,
		log: cfg.Logger.With("policy", policy), subs: make([]*nats.Subscription, g.Partitions()),
		leaving: make([]*leave, g.Partitions()), recounted: make([]time.Time, g.Partitions()),
	}
}

// Subject returns the subject root of the questions about the keys of
// policy drained in n partitions: those of partition i go to <root>.<i>.
// The root names n, so that shapers running the policy in different
// layouts (a change of partitions rolling out) never answer for each
// other's partitions.
func Subject(policy string, n int) string { return "_shaper.answers." + policy + "." + strconv.Itoa(n) }

// question is what a View asks the holder of a partition.
type question struct {
	Op    string        `json:"op"` // "key", "start", "stored", "retry" or "flight"
	Token string        `json:"token"`
	N     int64         `json:"n,omitempty"`    // start: the n-th fresh job
	Seq   uint64        `json:"seq,omitempty"`  // stored, retry, flight: the job's sequence
	Wait  time.Duration `json:"wait,omitempty"` // stored: how long to wait for the watch to report it
}

// reply is the holder's answer.
type reply struct {
	Status drain.KeyStatus `json:"status"`
	In     time.Duration   `json:"in"` // start, stored, retry: from the holder's now; flight: since
	// Held, for retry: the holder holds the job waiting for a retry; for
	// flight: it is delivering it.
	Held bool `json:"held,omitempty"`
	// Attempt, for flight: the delivery's attempt (0: not known).
	Attempt int `json:"attempt,omitempty"`
	// Waiting, for key and stored: since when the holder's deliveries of the policy
	// have found no consumer (Config.Waiting); absent when the last was
	// taken, and from a shaper that does not say.
	Waiting time.Time `json:"waiting,omitzero"`
}

// Serve starts (on) or stops answering the questions about partition i:
// call it with true once this shaper delivers the partition, with false
// before it stops (or Leave). Answers are computed from the partition's
// drainer at the holder's time. A shaper that starts serving a partition
// says so to the one that served it before (Leave).
func (v *View) Serve(i int, on bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.endLeave(i)
	sub := v.subs[i]
	if !on {
		v.subs[i] = nil
		if sub == nil {
			return nil
		}
		return sub.Unsubscribe()
	}
	if sub == nil {
		d := v.g.Part(i)
		var err error
		sub, err = v.nc.Subscribe(partSubject(v.root, i), func(m *nats.Msg) {
			go v.answer(d, m) // a stored job's answer may wait for the watch
		})
		if err != nil {
			return err
		}
		v.subs[i] = sub
	}
	return v.nc.Publish(servedSubject(v.root, i), nil)
}

// leave is a partition's wait for its next holder (Leave).
type leave struct {
	next  *nats.Subscription // the next holder's word (servedSubject)
	timer *time.Timer        // the bound
}

// Leave goes on answering the questions about partition i, which this
// shaper has just released, until the next holder serves them (Serve) or
// at most for bound: its drainer, released, still knows what the next
// holder will do with the keys (their last attempts, the slots reserved
// under the total cap, its delivered jobs freed), which the other shapers'
// passive drainers do not, and a graceful hand-over would otherwise leave
// the partition without an answer between the release and the take.
func (v *View) Leave(i int, bound time.Duration) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.subs[i] == nil || v.leaving[i] != nil {
		return nil
	}
	l := &leave{}
	end := func() { // the word or the bound, whichever comes first
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.leaving[i] == l {
			v.endLeave(i)
			v.subs[i].Unsubscribe()
			v.subs[i] = nil
		}
	}
	var err error
	if l.next, err = v.nc.Subscribe(servedSubject(v.root, i), func(*nats.Msg) { end() }); err != nil {
		err = errors.Join(err, v.subs[i].Unsubscribe())
		v.subs[i] = nil
		return err
	}
	l.timer = time.AfterFunc(bound, end)
	v.leaving[i] = l
	return nil
}

// endLeave ends partition i's wait for its next holder, if it waits,
// leaving its answers' subscription to the caller. v.mu must be held.
func (v *View) endLeave(i int) {
	if l := v.leaving[i]; l != nil {
		v.leaving[i] = nil
		l.timer.Stop()
		l.next.Unsubscribe()
	}
}

func partSubject(root string, i int) string { return root + "." + strconv.Itoa(i) }

// servedSubject is where a shaper that starts serving partition i says
// so, to the one leaving it (Leave).
func servedSubject(root string, i int) string { return partSubject(root, i) + ".served" }

// answer answers the question m about a key of d's partition.
func (v *View) answer(d *drain.Drainer, m *nats.Msg) {
	var q question
	if err := json.Unmarshal(m.Data, &q); err != nil {
		v.log.Warn("answers: a question that does not decode", "err", err)
		return
	}
	now := time.Now()
	var r reply
	switch q.Op {
	case "key":
		r.Status, r.Waiting = d.Key(q.Token, now), v.waiting()
	case "start":
		r.In = d.StartIn(q.Token, q.N, now)
	case "stored":
		r.Status, r.In = d.Stored(q.Token, q.Seq, now, q.Wait)
		r.Waiting = v.waiting()
	case "retry":
		r.In, r.Held = d.NextTry(q.Token, q.Seq, now)
	case "flight":
		var since time.Time
		if since, r.Attempt, r.Held = d.Delivering(q.Token, q.Seq); r.Held {
			r.In = max(now.Sub(since), 0)
		}
	default:
		return
	}
	data, err := json.Marshal(r)
	if err != nil {
		return
	}
	if err := m.Respond(data); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		v.log.Debug("answers: reply", "err", err)
	}
}

// ask asks the holder of token's partition q, and reports whether it
// answered: not when this shaper delivers the partition (its own drainer
// is the holder's), nor when no holder answered in time.
func (v *View) ask(q question) (reply, bool) {
	i := drain.PartitionOf(q.Token, v.g.Partitions())
	if v.nc == nil || v.g.Part(i).Active() {
		return reply{}, false
	}
	data, err := json.Marshal(q)
	if err != nil {
		return reply{}, false
	}
	m, err := v.nc.Request(partSubject(v.root, i), data, v.timeout)
	if err != nil {
		// No holder (nats.ErrNoResponders: one just killed), or a slow
		// one: the passive drainer answers, from a count of the
		// partition's jobs read afresh, since it does not see the
		// holder's removals.
		v.recount(i)
		return reply{}, false
	}
	var r reply
	if json.Unmarshal(m.Data, &r) != nil {
		return reply{}, false
	}
	return r, true
}

// recount reads partition i's depths afresh (drain.Group.Recount), at
// most every recountEvery.
func (v *View) recount(i int) {
	v.mu.Lock()
	due := time.Since(v.recounted[i]) >= recountEvery
	if due {
		v.recounted[i] = time.Now()
	}
	v.mu.Unlock()
	if due {
		ctx, cancel := context.WithTimeout(context.Background(), v.timeout)
		v.g.Recount(ctx, i)
		cancel()
	}
}

// Key returns the status of the key with token token (drain.Drainer.Key),
// from its partition's drainer.
func (v *View) Key(token string, now time.Time) drain.KeyStatus {
	if r, ok := v.ask(question{Op: "key", Token: token}); ok {
		return r.Status
	}
	return v.g.Key(token, now)
}

// KeyConsumer returns Key's status of the key, and since when the
// deliveries of the shaper that delivers it have found no consumer to take
// them (its Config.Waiting, in the same answer): the zero time when the
// last was taken, or when no holder answered (this shaper's own sink does
// not deliver the key then). It is the drain's own account of a key that
// does not move for want of a consumer.
func (v *View) KeyConsumer(token string, now time.Time) (drain.KeyStatus, time.Time) {
	if r, ok := v.ask(question{Op: "key", Token: token}); ok {
		return r.Status, r.Waiting
	}
	return v.g.Key(token, now), v.localWaiting(token)
}

// localWaiting is since when this shaper's deliveries have found no
// consumer, when it delivers the key with token token (the zero time when
// it does not: its own sink says nothing of the key then).
func (v *View) localWaiting(token string) time.Time {
	if v.g.Part(drain.PartitionOf(token, v.g.Partitions())).Active() {
		return v.waiting()
	}
	return time.Time{}
}

// Waiting is since when this shaper's deliveries of the policy have found
// no consumer (Config.Waiting), while it delivers any of its partitions;
// the zero time otherwise, and while they find one.
func (v *View) Waiting() time.Time {
	if v.Active() {
		return v.waiting()
	}
	return time.Time{}
}

// StartIn returns when the key's n-th fresh job would start
// (drain.Drainer.StartIn), from its partition's drainer.
func (v *View) StartIn(token string, n int64, now time.Time) time.Duration {
	if r, ok := v.ask(question{Op: "start", Token: token, N: n}); ok {
		return r.In
	}
	return v.g.StartIn(token, n, now)
}

// Stored answers for a job just stored (drain.Drainer.Stored), from its
// partition's drainer, which waits at most wait for its watch to report
// the job.
func (v *View) Stored(token string, seq uint64, now time.Time, wait time.Duration) (drain.KeyStatus, time.Duration) {
	st, in, _ := v.StoredConsumer(token, seq, now, wait)
	return st, in
}

// StoredConsumer is Stored with, in the same answer of the key's
// partition's drainer, since when its deliveries have found no consumer
// (as KeyConsumer says it): the ETA of a job admitted while nobody takes
// the policy's deliveries holds only once one subscribes.
func (v *View) StoredConsumer(token string, seq uint64, now time.Time, wait time.Duration) (drain.KeyStatus, time.Duration, time.Time) {
	if r, ok := v.ask(question{Op: "stored", Token: token, Seq: seq, Wait: wait}); ok {
		return r.Status, r.In, r.Waiting
	}
	st, in := v.g.Stored(token, seq, now, wait)
	return st, in, v.localWaiting(token)
}

// NextTry returns when the failed job at seq of the key with token token
// is tried again (drain.Drainer.NextTry), from its partition's drainer;
// false when that drainer holds no such job waiting for a retry.
func (v *View) NextTry(token string, seq uint64, now time.Time) (time.Duration, bool) {
	if r, ok := v.ask(question{Op: "retry", Token: token, Seq: seq}); ok {
		return r.In, r.Held
	}
	return v.g.NextTry(token, seq, now)
}

// Delivering reports whether the job at seq of the key with token token
// is being delivered (drain.Drainer.Delivering), by its partition's
// drainer: since when and its attempt (0: not known). Another shaper's
// drainer says for how long, as of its now: since is now less that, not a
// time of another clock.
func (v *View) Delivering(token string, seq uint64, now time.Time) (since time.Time, attempt int, ok bool) {
	if r, ok := v.ask(question{Op: "flight", Token: token, Seq: seq}); ok {
		return now.Add(-r.In), r.Attempt, r.Held
	}
	return v.g.Delivering(token, seq)
}

// Leaving reports whether this shaper still answers for a partition it
// released, its next holder not serving it yet (Leave).
func (v *View) Leaving() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.ContainsFunc(v.leaving, func(l *leave) bool { return l != nil })
}

// Active reports whether this shaper delivers any partition.
func (v *View) Active() bool { return v.g.Active() }
