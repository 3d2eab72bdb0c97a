package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Notice says that a job was stored: its key's token and its sequence,
// and the job itself when the watch read it whole (Job).
type Notice struct {
	Token string
	Seq   uint64

	job    *Msg          // the job, when made from one (NoticeOf)
	raw    jetstream.Msg // or the message read whole, decoded by Job
	q      *Queue        // of raw
	stored time.Time     // when the stream stored raw
}

// NoticeOf returns the notice of job m, stored, which Job returns: what
// another implementation of a watched queue reports (drain.MemQueue).
func NoticeOf(m *Msg) Notice { return Notice{Token: m.Token, Seq: m.Seq, job: m} }

// Job returns the job the notice reports, when the watch read it whole,
// decoded now (a watcher decodes only the jobs it keeps); nil when the
// watch read headers only (Config.WatchHeadersOnly).
func (n Notice) Job() *Msg {
	if n.job != nil || n.raw == nil {
		return n.job
	}
	return n.q.decode(n.Seq, n.Token, n.raw.Headers(), n.raw.Data(), n.stored)
}

// Key returns the key the notice's token encodes, and an error for a token
// no key encodes to (a message published to the queue's subjects by
// something other than Admit). Decoding costs a little: a watcher calls it
// when it first meets a token, not for every job.
func (n Notice) Key() (string, error) { return DecodeKey(n.Token) }

// Watch calls fn, in stream order and from one goroutine at a time, for
// every job in the queue now and every job stored later, until ctx ends,
// with the job read whole (Notice.Job), or its headers only
// (Config.WatchHeadersOnly: then its cost does not grow with payload size).
// A job removed before Watch reaches it is skipped.
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
	// A watch has caught up once it reported the job at the stream's last
	// sequence when its consumer started (caughtUpAt), or a job after which
	// nothing is pending: under a steady flow of new jobs nothing pending
	// may never be seen.
	handler := func(g int, caughtUpAt uint64) func(jetstream.Msg) {
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
			if token := q.Token(m.Subject()); token != "" {
				n := Notice{Token: token, Seq: md.Sequence.Stream}
				if !q.cfg.WatchHeadersOnly {
					n.raw, n.q, n.stored = m, q, md.Timestamp
				}
				fn(n)
			}
			if md.NumPending == 0 || md.Sequence.Stream >= caughtUpAt {
				q.markCaughtUp()
			}
		}
	}
	check := time.NewTicker(WatchStall / 3)
	defer check.Stop()
	var (
		current jetstream.ConsumeContext
		why     string // why the current consumer is given up
	)
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
			q.cfg.Logger.Warn("queue: restarting the watch", "stream", q.Stream(), "from", from, "why", why)
			go current.Stop()
			current = nil
		}
		before, _ := q.LastSeq(ctx)
		cons, err := q.js.OrderedConsumer(ctx, q.Stream(), jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:   from,
			HeadersOnly:   q.cfg.WatchHeadersOnly,
		})
		if err != nil {
			q.cfg.Logger.Debug("queue: watch: creating its consumer failed, retrying", "stream", q.Stream(), "err", err)
			continue
		}
		caughtUpAt := before
		if caughtUpAt == 0 {
			caughtUpAt = math.MaxUint64 // empty, or unknown: nothing pending says it
		}
		var opts []jetstream.PullConsumeOpt
		if !q.cfg.WatchHeadersOnly {
			opts = append(opts, jetstream.PullMaxMessagesWithBytesLimit(watchMessages, watchBuffer(q.cfg.MaxPayload)))
		}
		cc, err := cons.Consume(handler(g, caughtUpAt), opts...)
		if err != nil {
			q.cfg.Logger.Debug("queue: watch: starting its consumer failed, retrying", "stream", q.Stream(), "err", err)
			continue
		}
		current = cc
		mu.Lock()
		progress = time.Now()
		if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
			if before > floor {
				floor = before // nothing stored up to `before` is left to report
			}
			q.markCaughtUp()
		}
		mu.Unlock()
	watch:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-cc.Closed():
				why = "its consumer closed (the connection to the server was lost or the server deleted it)"
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
				if err == nil && stored > reported {
					// Jobs stored after the last reported may all have been
					// removed since (delivered). The stream, not the
					// consumer (which may be the part that stalled: after
					// a node's loss its state can say nothing is pending),
					// says whether any job after the last reported is left;
					// none: nothing is left to report up to stored.
					if _, gerr := q.stream.GetMsg(ctx, reported+1, jetstream.WithGetMsgSubject(q.prefix+"*")); errors.Is(gerr, jetstream.ErrMsgNotFound) {
						mu.Lock()
						floor = max(floor, stored)
						mu.Unlock()
						reported = stored
					}
				}
				if err != nil || stored <= reported {
					mu.Lock()
					progress = time.Now() // caught up (or cannot tell): look again later
					mu.Unlock()
					continue
				}
				why = fmt.Sprintf("no job reported for %s while the stream holds jobs after the last reported (%d > %d)", WatchStall, stored, reported)
				break watch // jobs stored and none reported for WatchStall
			}
		}
	}
	return nil
}

// WatchStall is how long Watch lets its consumer sit with jobs pending and
// nothing reported before it recreates it.
const WatchStall = 3 * time.Second

// watchMessages and watchBuffer bound what a watch reading jobs whole
// holds read ahead of its watcher: each pull request asks for at most
// watchMessages jobs (the client's default) and watchBuffer bytes. The
// client's default bounds messages only, which at large payloads (a queue
// full of 1 MiB jobs, read at start-up) would be 500 MiB. A bound on bytes
// alone (PullMaxBytes) makes the client ask for a million jobs at a time:
// at small jobs, it then holds some 80,000 read ahead, and the direct
// lane's publishes cost a third more CPU (BenchmarkDirectLane). The byte
// bound fits four of the largest jobs, since a pull request must fit one.
const watchMessages = 500

func watchBuffer(maxPayload int) int {
	return max(16<<20, 4*(maxPayload+64<<10))
}
