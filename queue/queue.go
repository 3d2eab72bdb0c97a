package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers every queued job carries; deliveries carry the same names.
const (
	HeaderJobID      = "Shaper-Job-Id"
	HeaderPolicy     = "Shaper-Policy"
	HeaderKey        = "Shaper-Key"
	HeaderEnqueuedAt = "Shaper-Enqueued-At"
	HeaderAttempt    = "Shaper-Attempt"
	HeaderTrace      = "traceparent"
	// HeaderDeferrals counts the re-admission attempts a deferred job waited
	// for; it is delivered with the job.
	HeaderDeferrals = "Shaper-Deferrals"
	// HeaderReplayOf names, on a replayed dead letter's job (a new job, of
	// a new id), the id of the dead job it replays.
	HeaderReplayOf = "Shaper-Replay-Of"
)

// Defaults for the zero Config.
const (
	DefaultSubjectRoot     = "shaper.q"
	DefaultStreamPrefix    = "SHAPER_Q_"
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultMaxPayload      = 1 << 20 // bytes of payload per job
	DefaultTimeout         = 2 * time.Second
)

// Config holds a queue's optional settings. The zero value means the
// documented defaults: file storage, one replica, a two-minute duplicate
// window, 1 MiB payloads, no stream-wide byte limit, a 2 s timeout per
// call, and a Watch that reports every job whole.
type Config struct {
	Replicas        int
	Storage         jetstream.StorageType
	DuplicateWindow time.Duration
	MaxPayload      int
	MaxBytes        int64 // stream-wide limit over all keys; 0 means none
	Timeout         time.Duration
	SubjectRoot     string // jobs of key k of policy p live on <root>.<p>.<token(k)>
	StreamPrefix    string // the stream of policy p is <prefix><p>
	// WatchHeadersOnly makes Watch read each job's headers only, leaving
	// Notice.Job returning nil: a drainer then reads every job it delivers (Get).
	// By default Watch reads each job whole, once, so that the drainer
	// delivering it need not read it again; every watcher (each shaper
	// watching the queue) then receives every payload.
	WatchHeadersOnly bool
	// Reserve, when set, refuses jobs (ErrStorageFull) once JetStream's
	// store is within the room it keeps for the shapers' own records.
	Reserve *Reserve
	Logger  *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.SubjectRoot == "" {
		c.SubjectRoot = DefaultSubjectRoot
	}
	if c.StreamPrefix == "" {
		c.StreamPrefix = DefaultStreamPrefix
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Queue is the bounded per-key queue of one policy: a JetStream stream with
// one subject per key, DiscardNew per subject and MaxMsgsPerSubject equal to
// the queue size, so the server itself refuses a job for a full key,
// atomically and across every shaper. A Queue is safe for concurrent use.
type Queue struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	policy string
	prefix string // "<root>.<policy>."
	layout Layout
	// removeSubject is the JetStream API subject Remove asks.
	removeSubject string
	cfg           Config
	size          atomic.Int64 // jobs a key may hold
	limit         atomic.Int64 // the stream's MaxMsgsPerSubject (>= size)
	// epoch is the stream's creation time in base 36, the first part of the
	// ids Admit makes. It is read again with every look at the stream's
	// state (LastSeq: when Watch restarts, which a deleted stream forces,
	// and when a drainer misses a job), so a stream deleted and created
	// again under a running shaper soon gets new ids.
	epoch atomic.Pointer[string]
	// caughtUp is closed once a Watch has reported every job stored when
	// it started (WatchCaughtUp).
	caughtUp     chan struct{}
	caughtUpOnce sync.Once
}

// WatchCaughtUp returns a channel closed once a Watch of the queue has
// reported every job that was stored when it started: the watcher (a
// drainer) then knows every key with jobs.
func (q *Queue) WatchCaughtUp() <-chan struct{} { return q.caughtUp }

func (q *Queue) markCaughtUp() { q.caughtUpOnce.Do(func() { close(q.caughtUp) }) }

// Open creates or updates the stream that holds policy's queue, with room for
// size jobs per key, and returns the Queue. A larger size than the stream
// holds is applied at once; a smaller one is applied only to an empty stream,
// because lowering MaxMsgsPerSubject over live data purges queued jobs.
func Open(ctx context.Context, js jetstream.JetStream, policy string, size int, cfg Config) (*Queue, error) {
	cfg = cfg.withDefaults()
	if size <= 0 {
		return nil, fmt.Errorf("queue: open %q: size %d must be positive", policy, size)
	}
	q := &Queue{js: js, policy: policy, cfg: cfg, prefix: cfg.SubjectRoot + "." + policy + ".", caughtUp: make(chan struct{})}
	q.layout = NewLayout(cfg.StreamPrefix+policy, q.prefix, cfg.MaxPayload)
	q.removeSubject = deleteSubject(js, cfg.StreamPrefix+policy)
	sc := jetstream.StreamConfig{
		Name:                 cfg.StreamPrefix + policy,
		Description:          "shaper queue of policy " + policy,
		Subjects:             []string{q.prefix + "*"},
		Retention:            jetstream.LimitsPolicy,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxMsgsPerSubject:    int64(size),
		MaxMsgs:              -1,
		MaxBytes:             -1,
		MaxAge:               0,
		MaxMsgSize:           int32(cfg.MaxPayload + 64*1024), // room for headers
		Storage:              cfg.Storage,
		Replicas:             cfg.Replicas,
		Duplicates:           cfg.DuplicateWindow,
		// Direct gets skip the JSON API (a base64 payload in JSON both
		// ways): a third of a delivery's CPU. With replicas they may be
		// answered by a lagging follower, which could hand out a job
		// already removed, so reads of a replicated queue go to the leader.
		AllowDirect: cfg.Replicas <= 1,
	}
	if cfg.MaxBytes > 0 {
		sc.MaxBytes = cfg.MaxBytes
	}
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.Timeout)
	defer cancel()
	// Create first: creating is idempotent, while an update racing another
	// shaper's creation of the same new stream can go unanswered.
	s, err := js.CreateStream(ctx, sc)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = js.Stream(ctx, sc.Name)
		if err == nil {
			info := s.CachedInfo()
			if old := info.Config.MaxMsgsPerSubject; int64(size) < old && info.State.Msgs > 0 {
				cfg.Logger.Warn("queue size lowered over live jobs: keeping the stream limit, admission enforces the new size",
					"policy", policy, "stream_limit", old, "size", size)
				sc.MaxMsgsPerSubject = old
			}
			if old := info.Config.Replicas; old > sc.Replicas {
				// Fewer replicas would keep the jobs on fewer servers:
				// that is the operator's call, never a side effect.
				cfg.Logger.Warn("queue: keeping the stream's replicas", "policy", policy, "replicas", old, "asked", sc.Replicas)
				sc.Replicas = old
				sc.AllowDirect = false
			}
			s, err = js.UpdateStream(ctx, sc)
		}
	}
	if err != nil {
		return nil, classify("queue: open "+policy, err)
	}
	q.stream = s
	q.setEpoch(s.CachedInfo().Created)
	q.size.Store(int64(size))
	q.limit.Store(sc.MaxMsgsPerSubject)
	return q, nil
}

// Resize changes how many jobs a key may hold. A larger size raises the
// stream's per-subject limit at once; a smaller one only lowers Size, since
// lowering the limit over live data would purge queued jobs: while Size is
// below Limit, callers enforce Size themselves (Admit cannot).
func (q *Queue) Resize(ctx context.Context, size int) error {
	if size <= 0 {
		return fmt.Errorf("queue: resize %q: size %d must be positive", q.policy, size)
	}
	if int64(size) > q.limit.Load() {
		ctx, cancel := context.WithTimeout(ctx, 2*q.cfg.Timeout)
		defer cancel()
		info, err := q.stream.Info(ctx)
		if err != nil {
			return classify("queue: resize", err)
		}
		cfg := info.Config
		cfg.MaxMsgsPerSubject = int64(size)
		if _, err := q.js.UpdateStream(ctx, cfg); err != nil {
			return classify("queue: resize", err)
		}
		q.limit.Store(int64(size))
	}
	q.size.Store(int64(size))
	return nil
}

// Limit returns the stream's per-subject limit: what Admit enforces
// atomically. It is at least Size.
func (q *Queue) Limit() int { return int(q.limit.Load()) }

// Policy returns the policy name the queue belongs to.
func (q *Queue) Policy() string { return q.policy }

// Stream returns the name of the JetStream stream behind the queue.
func (q *Queue) Stream() string { return q.cfg.StreamPrefix + q.policy }

// Layout returns where and how the queue stores its jobs.
func (q *Queue) Layout() Layout { return q.layout }

// Size returns how many jobs a key may hold.
func (q *Queue) Size() int { return int(q.size.Load()) }

// MaxPayload returns the largest payload Admit accepts, in bytes.
func (q *Queue) MaxPayload() int { return q.cfg.MaxPayload }

// Subject returns the subject the jobs of the key with token token live on.
func (q *Queue) Subject(token string) string { return q.prefix + token }

// Token returns the key token of a queue subject, or "" if subject is not one of q's.
func (q *Queue) Token(subject string) string {
	t, ok := strings.CutPrefix(subject, q.prefix)
	if !ok || strings.ContainsRune(t, '.') {
		return ""
	}
	return t
}

// Job is a unit of work as it is queued and delivered.
type Job struct {
	// ID is the job's id. Empty, Admit gives the job the id of where it is
	// stored (see JobID): it then costs no header, lets anyone find the job
	// from its id alone, and Dedupe (if set) deduplicates resubmissions. Set,
	// it is stored with the job and is also its Nats-Msg-Id, so storing the
	// same job again within the duplicate window stores nothing new.
	ID         string
	Dedupe     string      // Nats-Msg-Id of a job without an ID (an Idempotency-Key's hash); may be empty
	Key        string      // the original key
	Payload    []byte      // the body, at most MaxPayload bytes
	EnqueuedAt time.Time   // when the job was first accepted; zero means now (the stream's timestamp)
	Attempt    int         // delivery attempt, 1-based; 0 means 1
	Header     nats.Header // extra headers to keep (traceparent…; Nats-* ones are dropped); may be nil
}

// Receipt tells where an admitted job was stored.
type Receipt struct {
	ID        string // the job's id: Job.ID, or the one Admit made
	Seq       uint64 // stream sequence of the job
	Duplicate bool   // the job was already stored within the duplicate window: nothing new was queued
}

// Admit stores job at the tail of its key's queue. It returns an error
// wrapping ErrFull when the key holds Size jobs, ErrTooLarge for an oversized
// payload, ErrBadKey for a bad key, ErrBadID for an ID that is not
// ValidJobID, ErrStreamFull when a stream-wide limit
// refuses it and ErrUnavailable when JetStream does not answer in time. A job
// whose ID (or Dedupe) was stored within the duplicate window is not stored
// again: the receipt then names the job stored first.
//
// Only what cannot be derived is stored with the job: the key is its
// subject's token, the policy its stream, and the enqueue time the stream's
// timestamp unless EnqueuedAt is set; Msg fills them in when the job is read.
func (q *Queue) Admit(ctx context.Context, job Job) (Receipt, error) {
	m, size, err := q.message(job)
	if err != nil {
		return Receipt{}, err
	}
	seq, dup, err := q.publish(ctx, m)
	q.cfg.Reserve.done(size, err == nil && !dup || MaybeStored(err))
	if err != nil {
		return Receipt{}, classify("queue: admit", err)
	}
	return q.receipt(job.ID, seq, dup), nil
}

// message checks job and returns the message that stores it
// (Layout.Message), and its size as the Reserve took it (Reserve.done
// gives it back once its store is answered).
func (q *Queue) message(job Job) (*nats.Msg, int64, error) {
	m, err := q.layout.Message(job)
	if err != nil {
		return nil, 0, err
	}
	if nc := q.js.Conn(); nc.Status() != nats.CONNECTED {
		return nil, 0, fmt.Errorf("queue: admit: %w: nats connection %s", ErrUnavailable, nc.Status())
	}
	if q.cfg.Reserve == nil {
		return m, 0, nil
	}
	size := storedSize(m)
	if err := q.cfg.Reserve.take(size); err != nil {
		return nil, 0, err
	}
	return m, size, nil
}

func (q *Queue) receipt(id string, seq uint64, dup bool) Receipt {
	if id == "" {
		id = q.JobID(seq)
	}
	return Receipt{ID: id, Seq: seq, Duplicate: dup}
}

// Pending is a job AdmitAsync sent to JetStream.
type Pending struct {
	q    *Queue
	id   string
	size int64 // as the Reserve took it
	f    jetstream.PubAckFuture
	err  error
}

// AdmitAsync is Admit without waiting for JetStream's answer: jobs sent one
// after another share the connection's writes and JetStream's acks, so a
// stream of submissions costs far less per job than one Admit each. Wait
// returns what Admit would have. The JetStream of the queue must have been
// made with jetstream.WithPublishAsyncTimeout, or a lost answer is waited
// for until the connection closes. There are no retries on "no
// responders" (a stream leader being elected): that comes back as
// ErrUnavailable at once.
func (q *Queue) AdmitAsync(job Job) *Pending {
	p := &Pending{q: q, id: job.ID}
	m, size, err := q.message(job)
	if err != nil {
		p.err = err
		return p
	}
	if p.f, err = q.js.PublishMsgAsync(m); err != nil {
		q.cfg.Reserve.done(size, false)
		p.err = classify("queue: admit", err)
		return p
	}
	p.size = size
	return p
}

// Wait returns the job's receipt once JetStream has answered, or Admit's
// errors.
func (p *Pending) Wait() (Receipt, error) {
	if p.err != nil {
		return Receipt{}, p.err
	}
	size := p.size
	p.size = 0 // given back once
	select {
	case ack := <-p.f.Ok():
		p.q.cfg.Reserve.done(size, !ack.Duplicate)
		return p.q.receipt(p.id, ack.Sequence, ack.Duplicate), nil
	case err := <-p.f.Err():
		p.q.cfg.Reserve.done(size, MaybeStored(err))
		return Receipt{}, classify("queue: admit", err)
	}
}

// JobHeader returns a copy of h without NATS's and JetStream's own headers
// (Nats-*: message ids, expectations, sizes), which are set per publish and
// must not travel with a job from one stream to the next.
func JobHeader(h nats.Header) nats.Header {
	out := make(nats.Header, len(h)+5)
	for k, v := range h {
		if !strings.HasPrefix(k, "Nats-") {
			out[k] = v
		}
	}
	return out
}
