package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
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
// window, 1 MiB payloads, no stream-wide byte limit, a 2 s timeout per call.
type Config struct {
	Replicas        int
	Storage         jetstream.StorageType
	DuplicateWindow time.Duration
	MaxPayload      int
	MaxBytes        int64 // stream-wide limit over all keys; 0 means none
	Timeout         time.Duration
	SubjectRoot     string // jobs of key k of policy p live on <root>.<p>.<token(k)>
	StreamPrefix    string // the stream of policy p is <prefix><p>
	Logger          *slog.Logger
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
	cfg    Config
	size   atomic.Int64 // jobs a key may hold
	limit  atomic.Int64 // the stream's MaxMsgsPerSubject (>= size)
	// epoch is the stream's creation time in base 36, the first part of the
	// ids Admit makes. It is read again with every look at the stream's
	// state (LastSeq: when Watch restarts, which a deleted stream forces,
	// and when a drainer misses a job), so a stream deleted and created
	// again under a running shaper soon gets new ids.
	epoch atomic.Pointer[string]
}

// Open creates or updates the stream that holds policy's queue, with room for
// size jobs per key, and returns the Queue. A larger size than the stream
// holds is applied at once; a smaller one is applied only to an empty stream,
// because lowering MaxMsgsPerSubject over live data purges queued jobs.
func Open(ctx context.Context, js jetstream.JetStream, policy string, size int, cfg Config) (*Queue, error) {
	cfg = cfg.withDefaults()
	if size <= 0 {
		return nil, fmt.Errorf("queue: open %q: size %d must be positive", policy, size)
	}
	q := &Queue{js: js, policy: policy, cfg: cfg, prefix: cfg.SubjectRoot + "." + policy + "."}
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
		AllowDirect:          false, // reads must come from the leader: a lagging replica could hand out a job already removed
	}
	if cfg.MaxBytes > 0 {
		sc.MaxBytes = cfg.MaxBytes
	}
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.Timeout)
	defer cancel()
	s, err := js.Stream(ctx, sc.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err = js.CreateStream(ctx, sc)
	case err == nil:
		info := s.CachedInfo()
		if old := info.Config.MaxMsgsPerSubject; int64(size) < old && info.State.Msgs > 0 {
			cfg.Logger.Warn("queue size lowered over live jobs: keeping the stream limit, admission enforces the new size",
				"policy", policy, "stream_limit", old, "size", size)
			sc.MaxMsgsPerSubject = old
		}
		s, err = js.UpdateStream(ctx, sc)
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
// payload, ErrBadKey for a bad key, ErrStreamFull when a stream-wide limit
// refuses it and ErrUnavailable when JetStream does not answer in time. A job
// whose ID (or Dedupe) was stored within the duplicate window is not stored
// again: the receipt then names the job stored first.
//
// Only what cannot be derived is stored with the job: the key is its
// subject's token, the policy its stream, and the enqueue time the stream's
// timestamp unless EnqueuedAt is set; Msg fills them in when the job is read.
func (q *Queue) Admit(ctx context.Context, job Job) (Receipt, error) {
	m, err := q.message(job)
	if err != nil {
		return Receipt{}, err
	}
	seq, dup, err := q.publish(ctx, m)
	if err != nil {
		return Receipt{}, classify("queue: admit", err)
	}
	return q.receipt(job.ID, seq, dup), nil
}

// message checks job and returns the message that stores it.
func (q *Queue) message(job Job) (*nats.Msg, error) {
	token, err := EncodeKey(job.Key)
	if err != nil {
		return nil, fmt.Errorf("queue: admit: %w", err)
	}
	if len(job.Payload) > q.cfg.MaxPayload {
		return nil, fmt.Errorf("queue: admit: %w: %d bytes, at most %d", ErrTooLarge, len(job.Payload), q.cfg.MaxPayload)
	}
	if nc := q.js.Conn(); nc.Status() != nats.CONNECTED {
		return nil, fmt.Errorf("queue: admit: %w: nats connection %s", ErrUnavailable, nc.Status())
	}
	h := JobHeader(job.Header)
	// Header keys are written in their canonical form directly: Set would
	// canonicalise each one again on every admission.
	h[headerExpectedStream] = []string{q.Stream()}
	switch {
	case job.ID != "":
		h[HeaderJobID] = []string{job.ID}
		h[headerMsgID] = []string{job.ID}
	case job.Dedupe != "":
		h[headerMsgID] = []string{job.Dedupe}
	}
	if !job.EnqueuedAt.IsZero() {
		h[HeaderEnqueuedAt] = []string{job.EnqueuedAt.UTC().Format(time.RFC3339Nano)}
	}
	if job.Attempt > 1 {
		h[HeaderAttempt] = []string{strconv.Itoa(job.Attempt)}
	}
	return &nats.Msg{Subject: q.prefix + token, Data: job.Payload, Header: h}, nil
}

func (q *Queue) receipt(id string, seq uint64, dup bool) Receipt {
	if id == "" {
		id = q.JobID(seq)
	}
	return Receipt{ID: id, Seq: seq, Duplicate: dup}
}

// Pending is a job AdmitAsync sent to JetStream.
type Pending struct {
	q   *Queue
	id  string
	f   jetstream.PubAckFuture
	err error
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
	m, err := q.message(job)
	if err != nil {
		p.err = err
		return p
	}
	if p.f, err = q.js.PublishMsgAsync(m); err != nil {
		p.err = classify("queue: admit", err)
	}
	return p
}

// Wait returns the job's receipt once JetStream has answered, or Admit's
// errors.
func (p *Pending) Wait() (Receipt, error) {
	if p.err != nil {
		return Receipt{}, p.err
	}
	select {
	case ack := <-p.f.Ok():
		return p.q.receipt(p.id, ack.Sequence, ack.Duplicate), nil
	case err := <-p.f.Err():
		return Receipt{}, classify("queue: admit", err)
	}
}

// JobID returns the id of a job Admit stored at seq without an id of its
// own: the stream's creation time and the sequence, both in base 36 and
// joined by '-' (a character neither nuid nor hex ids contain). The creation
// time keeps ids unique when a stream is deleted and created again.
func (q *Queue) JobID(seq uint64) string { return JobID(*q.epoch.Load(), seq) }

func (q *Queue) setEpoch(created time.Time) {
	e := EpochOf(created)
	q.epoch.Store(&e)
}

// JobID is Queue.JobID for a stream of the given epoch (EpochOf its
// creation time), for readers of a queue's stream that have no Queue.
func JobID(epoch string, seq uint64) string {
	return epoch + "-" + strconv.FormatUint(seq, 36)
}

// EpochOf returns the epoch part of the ids of a stream created at created.
func EpochOf(created time.Time) string { return strconv.FormatInt(created.UnixNano(), 36) }

// MaxJobIDLen bounds the ids ValidJobID accepts. The shaper's ids are at
// most 27 bytes: 22 for a nuid, 25 for an Idempotency-Key's hash, 27 for an
// id JobID makes.
const MaxJobIDLen = 64

// ValidJobID reports whether id could be a job id the shaper made: 1 to
// MaxJobIDLen bytes of [A-Za-z0-9_-], the characters of a plain key. An id
// from outside (GET /v1/jobs/{id}) must pass it before it is used in a
// subject: a few KiB past the server's control line limit, and the server
// closes the connection.
func ValidJobID(id string) bool { return id != "" && len(id) <= MaxJobIDLen && plain(id) }

// SeqOf returns the sequence of the job an id made by JobID names, and
// false when id is not such an id of this queue.
func (q *Queue) SeqOf(id string) (uint64, bool) {
	rest, ok := strings.CutPrefix(id, *q.epoch.Load()+"-")
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(rest, 36, 64)
	if err != nil || seq == 0 || strconv.FormatUint(seq, 36) != rest {
		return 0, false
	}
	return seq, true
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

// Msg is a job read back from the queue, with every field of its Job
// filled in (ID, Key, EnqueuedAt and Attempt derived when not stored).
type Msg struct {
	Seq   uint64 // stream sequence; pass it to Remove
	Token string // the key's subject token
	Job
}

// Headers returns the headers the job travels with once it leaves the
// queue (to a delivery, a dead letter): its own non-NATS headers plus
// Shaper-Job-Id, Shaper-Policy, Shaper-Key, Shaper-Enqueued-At and
// Shaper-Attempt for policy.
func (m *Msg) Headers(policy string) nats.Header {
	h := JobHeader(m.Header)
	h[HeaderJobID] = []string{m.ID}
	h[HeaderPolicy] = []string{policy}
	h[HeaderKey] = []string{m.Key}
	h[HeaderEnqueuedAt] = []string{m.EnqueuedAt.UTC().Format(time.RFC3339Nano)}
	h[HeaderAttempt] = []string{strconv.Itoa(m.Attempt)}
	return h
}

// Next returns the first job of key token with a sequence at or after from,
// or an error wrapping ErrEmpty when there is none. Jobs of one key come back
// in the order they were admitted.
func (q *Queue) Next(ctx context.Context, token string, from uint64) (*Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	raw, err := q.stream.GetMsg(ctx, max(from, 1), jetstream.WithGetMsgSubject(q.prefix+token))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, ErrEmpty
		}
		return nil, classify("queue: next", err)
	}
	return q.decode(raw.Sequence, token, raw.Header, raw.Data, raw.Time), nil
}

// Get returns the job stored at seq, which must be a job of key token; an
// error wrapping ErrEmpty when it is gone. Unlike Next it is one index
// lookup, however many other keys' jobs are stored after it.
func (q *Queue) Get(ctx context.Context, token string, seq uint64) (*Msg, error) {
	m, err := q.Lookup(ctx, seq)
	if err != nil {
		return nil, err
	}
	if m.Token != token {
		return nil, fmt.Errorf("queue: get %d: %w: it belongs to %s, not %s", seq, ErrEmpty, q.Subject(m.Token), q.Subject(token))
	}
	return m, nil
}

// LastSeq returns the sequence of the last job the stream stored, as its
// leader sees it now.
func (q *Queue) LastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	info, err := q.stream.Info(ctx)
	if err != nil {
		return 0, classify("queue: last sequence", err)
	}
	q.setEpoch(info.Created)
	return info.State.LastSeq, nil
}

// Lookup returns the job stored at seq, whatever its key; an error wrapping
// ErrEmpty when there is none.
func (q *Queue) Lookup(ctx context.Context, seq uint64) (*Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	raw, err := q.stream.GetMsg(ctx, seq)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, ErrEmpty
		}
		return nil, classify("queue: lookup", err)
	}
	token := q.Token(raw.Subject)
	if token == "" {
		return nil, fmt.Errorf("queue: lookup %d: %w: %s is not a key's subject", seq, ErrEmpty, raw.Subject)
	}
	return q.decode(raw.Sequence, token, raw.Header, raw.Data, raw.Time), nil
}

func (q *Queue) decode(seq uint64, token string, h nats.Header, data []byte, stored time.Time) *Msg {
	m := &Msg{Seq: seq, Token: token, Job: Job{Payload: data, Header: h}}
	m.ID = h.Get(HeaderJobID)
	if m.ID == "" {
		m.ID = q.JobID(seq)
	}
	m.Key = h.Get(HeaderKey)
	if m.Key == "" {
		m.Key, _ = DecodeKey(token)
	}
	if t, err := time.Parse(time.RFC3339Nano, h.Get(HeaderEnqueuedAt)); err == nil {
		m.EnqueuedAt = t
	} else {
		m.EnqueuedAt = stored
	}
	m.Attempt, _ = strconv.Atoi(h.Get(HeaderAttempt))
	if m.Attempt <= 0 {
		m.Attempt = 1
	}
	return m
}

// Remove deletes the job stored at seq, freeing its key's slot. Removing a
// job that is already gone is not an error.
func (q *Queue) Remove(ctx context.Context, seq uint64) error {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	err := q.stream.DeleteMsg(ctx, seq)
	if err != nil && (strings.Contains(err.Error(), "not found") || strings.Contains(err.Error(), "no message found")) {
		return nil
	}
	return classify("queue: remove", err)
}

// Depths returns the number of jobs stored per key, read from the stream
// (exact, but one JetStream request over every subject: not for a hot path).
func (q *Queue) Depths(ctx context.Context) (map[string]uint64, error) {
	byToken, err := q.TokenDepths(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(byToken))
	for t, n := range byToken {
		if k, err := DecodeKey(t); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// TokenDepths is Depths keyed by key token.
func (q *Queue) TokenDepths(ctx context.Context) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	info, err := q.stream.Info(ctx, jetstream.WithSubjectFilter(q.prefix+"*"))
	if err != nil {
		return nil, classify("queue: depths", err)
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if t := q.Token(subj); t != "" {
			out[t] = n
		}
	}
	return out, nil
}

// Notice says that a job was stored: its key's token and its sequence.
type Notice struct {
	Token string
	Seq   uint64
}

// Key returns the key the notice's token encodes, and an error for a token
// no key encodes to (a message published to the queue's subjects by
// something other than Admit). Decoding costs a little: a watcher calls it
// when it first meets a token, not for every job.
func (n Notice) Key() (string, error) { return DecodeKey(n.Token) }

// Watch calls fn, in stream order and from one goroutine at a time, for
// every job in the queue now and every job stored later, until ctx ends. It
// reads headers only, so its cost does not grow with payload size. A job
// removed before Watch reaches it is skipped.
//
// Drainers depend on Watch to learn of every job, so it heals itself: when
// the stream has stored jobs past the last one reported and nothing has been
// reported for WatchStall, or when its consumer closes, it starts a new
// ordered consumer from the job after the last one reported. (nats.go's
// ordered consumer can hang in its own reset, holding its lock, after a
// stream leader is lost: the stalled one is abandoned, not waited for.)
func (q *Queue) Watch(ctx context.Context, fn func(Notice)) error {
	var (
		mu       sync.Mutex
		gen      int       // generation of the consumer allowed to report
		last     uint64    // last stream sequence reported
		floor    uint64    // no job up to here is waiting to be reported
		progress time.Time // when last changed, or floor was raised
	)
	handler := func(g int) func(jetstream.Msg) {
		return func(m jetstream.Msg) {
			md, err := m.Metadata()
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if g != gen || md.Sequence.Stream <= last {
				return
			}
			last, progress = md.Sequence.Stream, time.Now()
			token := q.Token(m.Subject())
			if token == "" {
				return
			}
			fn(Notice{Token: token, Seq: md.Sequence.Stream})
		}
	}
	check := time.NewTicker(WatchStall / 3)
	defer check.Stop()
	var current jetstream.ConsumeContext
	defer func() {
		if current != nil {
			go current.Stop() // may block in a hung consumer: never wait for it
		}
	}()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(min(time.Duration(attempt)*250*time.Millisecond, 2*time.Second)):
			}
		}
		mu.Lock()
		gen++
		g, from := gen, last+1
		mu.Unlock()
		if current != nil {
			q.cfg.Logger.Warn("queue: restarting the watch", "stream", q.Stream(), "from", from)
			go current.Stop()
			current = nil
		}
		before, _ := q.LastSeq(ctx)
		cons, err := q.js.OrderedConsumer(ctx, q.Stream(), jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:   from,
			HeadersOnly:   true,
		})
		if err != nil {
			continue
		}
		cc, err := cons.Consume(handler(g))
		if err != nil {
			continue
		}
		current = cc
		mu.Lock()
		progress = time.Now()
		if info := cons.CachedInfo(); info != nil && info.NumPending == 0 && before > floor {
			floor = before // nothing stored up to `before` is left to report
		}
		mu.Unlock()
	watch:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-cc.Closed():
				break watch
			case <-check.C:
				mu.Lock()
				stalled := time.Since(progress) >= WatchStall
				reported := max(last, floor)
				mu.Unlock()
				if !stalled {
					continue
				}
				stored, err := q.LastSeq(ctx)
				if err != nil || stored <= reported {
					mu.Lock()
					progress = time.Now() // caught up (or cannot tell): look again later
					mu.Unlock()
					continue
				}
				break watch // jobs stored and none reported for WatchStall
			}
		}
	}
	return nil
}

// WatchStall is how long Watch lets its consumer sit with jobs pending and
// nothing reported before it recreates it.
const WatchStall = 3 * time.Second
