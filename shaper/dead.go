package shaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// Dead letters of policy p live in SHAPER_DEAD_<p> on shaper.dead.<p>.<key
// token>, each with its payload, its headers, the reason and its history.
const (
	deadSubjectRoot  = "shaper.dead"
	deadStreamPrefix = "SHAPER_DEAD_"

	HeaderDeadReason  = "Shaper-Dead-Reason"
	HeaderDeadAt      = "Shaper-Dead-At"
	HeaderDeadHistory = "Shaper-Dead-History" // JSON array of strings
	HeaderDeadFrom    = "Shaper-Dead-From"    // "queue" or "deferred"
)

func deadStream(policy string) string { return deadStreamPrefix + policy }

func deadSubject(policy, token string) string {
	return deadSubjectRoot + "." + policy + "." + token
}

func (s *Shaper) openDead(ctx context.Context, policy string) error {
	_, err := s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        deadStream(policy),
		Description: "shaper dead letters of policy " + policy,
		Subjects:    []string{deadSubjectRoot + "." + policy + ".*"},
		Retention:   jetstream.LimitsPolicy,
		Replicas:    s.cfg.Replicas,
		Duplicates:  2 * time.Minute,
		MaxMsgSize:  int32(max(s.cfg.MaxPayload, queue.DefaultMaxPayload) + 128*1024),
	})
	if err != nil {
		return fmt.Errorf("dead-letter stream: %w", err)
	}
	return nil
}

// deadLetterFunc returns the drain.Config.DeadLetter of rt's drainers.
func (s *Shaper) deadLetterFunc(rt *runtime, from string) func(context.Context, *queue.Msg, string, []string) error {
	return func(ctx context.Context, m *queue.Msg, reason string, history []string) error {
		p := rt.pol.Load()
		h := m.Headers(p.Name)
		hist, _ := json.Marshal(history)
		h.Set(HeaderDeadReason, reason)
		h.Set(HeaderDeadAt, time.Now().UTC().Format(time.RFC3339Nano))
		h.Set(HeaderDeadHistory, string(hist))
		h.Set(HeaderDeadFrom, from)
		h.Set(queue.HeaderAttempt, strconv.Itoa(m.Attempt-1)) // attempts made
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msg := &nats.Msg{Subject: deadSubject(p.Name, m.Token), Data: m.Payload, Header: h}
		// The id dedupes a dead-lettering repeated after a crash.
		if _, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID+"/dead/"+strconv.FormatUint(m.Seq, 10)+"/"+from)); err != nil {
			return fmt.Errorf("dead-letter %s: %w", m.ID, err)
		}
		rec := jobRecord{ID: m.ID, Policy: p.Name, Key: m.Key, Status: statusDead, Reason: reason, History: history}
		if from == "deferred" {
			rec.Deferrals = m.Attempt - 1
		} else {
			rec.Attempts = m.Attempt - 1
		}
		s.jobs.put(rec)
		s.log.Warn("job dead-lettered", "policy", p.Name, "key", m.Key, "job", m.ID, "reason", reason)
		return nil
	}
}

// DeadLetter is one dead-lettered job as the API shows it.
type DeadLetter struct {
	Seq      uint64    `json:"seq"`
	Policy   string    `json:"policy"`
	Key      string    `json:"key"`
	ID       string    `json:"id"`
	Reason   string    `json:"reason"`
	From     string    `json:"from"`
	At       time.Time `json:"at"`
	Attempts int       `json:"attempts"`
	History  []string  `json:"history"`
	Size     int       `json:"size"`
	Payload  *string   `json:"payload,omitempty"` // with show: the payload, when it is UTF-8 text
	Bytes    []byte    `json:"payload_base64,omitempty"`

	data []byte
}

// deadFilter selects dead letters.
type deadFilter struct {
	policy, key, reason string
	limit               int
}

func (f deadFilter) match(d DeadLetter) bool {
	return (f.key == "" || d.Key == f.key) && (f.reason == "" || d.Reason == f.reason)
}

// deadLetters walks the dead letters of f.policy (or every policy) in order
// and calls fn for each match until fn returns false.
func (s *Shaper) deadLetters(ctx context.Context, f deadFilter, fn func(DeadLetter) bool) error {
	names := []string{f.policy}
	if f.policy == "" {
		names = names[:0]
		s.mu.RLock()
		for _, p := range s.set.Policies() {
			names = append(names, p.Name)
		}
		s.mu.RUnlock()
	}
	for _, name := range names {
		stream, err := s.js.Stream(ctx, deadStream(name))
		if err != nil {
			return err
		}
		if stream.CachedInfo().State.Msgs == 0 {
			continue
		}
		cfg := jetstream.OrderedConsumerConfig{}
		if f.key != "" {
			tok, err := queue.EncodeKey(f.key)
			if err != nil {
				return err
			}
			cfg.FilterSubjects = []string{deadSubject(name, tok)}
		}
		cons, err := s.js.OrderedConsumer(ctx, deadStream(name), cfg)
		if err != nil {
			return err
		}
		for {
			batch, err := cons.FetchNoWait(256)
			if err != nil {
				return err
			}
			n := 0
			more := true
			for m := range batch.Messages() {
				n++
				md, _ := m.Metadata()
				d := decodeDead(name, m.Headers(), m.Data(), md)
				if f.match(d) && !fn(d) {
					return nil
				}
				if md != nil && md.NumPending == 0 {
					more = false
				}
			}
			if batch.Error() != nil {
				return batch.Error()
			}
			if n == 0 || !more {
				break
			}
		}
	}
	return nil
}

func decodeDead(policy string, h nats.Header, data []byte, md *jetstream.MsgMetadata) DeadLetter {
	d := DeadLetter{Policy: policy, Key: h.Get(queue.HeaderKey), ID: h.Get(queue.HeaderJobID),
		Reason: h.Get(HeaderDeadReason), From: h.Get(HeaderDeadFrom), Size: len(data), data: data}
	if md != nil {
		d.Seq = md.Sequence.Stream
	}
	d.At, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderDeadAt))
	d.Attempts, _ = strconv.Atoi(h.Get(queue.HeaderAttempt))
	json.Unmarshal([]byte(h.Get(HeaderDeadHistory)), &d.History)
	return d
}

// handleDeadList serves GET /v1/dead?policy=&key=&reason=&limit=.
func (s *Shaper) handleDeadList(w http.ResponseWriter, r *http.Request) {
	out, ok := s.matchingDead(w, r, 100)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead": out})
}

// handleDeadShow serves GET /v1/dead/{policy}/{seq}: one dead letter with its payload.
func (s *Shaper) handleDeadShow(w http.ResponseWriter, r *http.Request) {
	policy := r.PathValue("policy")
	if s.runtime(policy) == nil {
		writeOutcome(w, failed(http.StatusNotFound, "unknown policy "+quote(policy)))
		return
	}
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		writeOutcome(w, failed(http.StatusBadRequest, "bad sequence "+quote(r.PathValue("seq"))))
		return
	}
	stream, err := s.js.Stream(r.Context(), deadStream(policy))
	if err != nil {
		writeOutcome(w, unavailable("backend", err))
		return
	}
	raw, err := stream.GetMsg(r.Context(), seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		writeOutcome(w, failed(http.StatusNotFound, "no dead letter "+strconv.FormatUint(seq, 10)+" in policy "+quote(policy)))
		return
	} else if err != nil {
		writeOutcome(w, unavailable("backend", err))
		return
	}
	d := decodeDead(policy, raw.Header, raw.Data, nil)
	d.Seq = raw.Sequence
	if utf8.Valid(raw.Data) {
		text := string(raw.Data)
		d.Payload = &text
	} else {
		d.Bytes = raw.Data
	}
	writeJSON(w, http.StatusOK, d)
}

// handleDeadReplay serves POST /v1/dead/replay?policy=&key=&reason=: each
// matching dead letter is submitted again through the normal admission path
// (as a new job id) and removed once that submission was kept (202, or 429
// deferred).
func (s *Shaper) handleDeadReplay(w http.ResponseWriter, r *http.Request) {
	s.deadApply(w, r, func(ctx context.Context, d DeadLetter) (string, bool) {
		o := s.submit(ctx, submission{policy: d.Policy, key: d.Key, payload: d.data})
		switch o.Status {
		case statusQueued, statusDeferred:
			s.jobs.put(jobRecord{ID: d.ID, Policy: d.Policy, Key: d.Key, Status: statusDead, Reason: d.Reason, LastError: "replayed as " + o.ID})
			return o.ID, true
		}
		return "", false
	})
}

// handleDeadPurge serves DELETE /v1/dead?policy=&key=&reason=.
func (s *Shaper) handleDeadPurge(w http.ResponseWriter, r *http.Request) {
	s.deadApply(w, r, func(context.Context, DeadLetter) (string, bool) { return "", true })
}

// deadApply runs fn over the matching dead letters and deletes each one fn
// says is done with.
func (s *Shaper) deadApply(w http.ResponseWriter, r *http.Request, fn func(context.Context, DeadLetter) (string, bool)) {
	matched, ok := s.matchingDead(w, r, 1<<30)
	if !ok {
		return
	}
	type result struct {
		Seq    uint64 `json:"seq"`
		Policy string `json:"policy"`
		ID     string `json:"id"`
		NewID  string `json:"new_id,omitempty"`
		Done   bool   `json:"done"`
	}
	res := []result{}
	done := 0
	for _, d := range matched {
		newID, ok := fn(r.Context(), d)
		if ok {
			stream, err := s.js.Stream(r.Context(), deadStream(d.Policy))
			if err == nil {
				err = stream.DeleteMsg(r.Context(), d.Seq)
			}
			if err != nil {
				ok = false
				s.log.Warn("dead letter not removed", "policy", d.Policy, "seq", d.Seq, "err", err)
			}
		}
		if ok {
			done++
		}
		res = append(res, result{Seq: d.Seq, Policy: d.Policy, ID: d.ID, NewID: newID, Done: ok})
	}
	writeJSON(w, http.StatusOK, map[string]any{"matched": len(matched), "done": done, "results": res})
}

// matchingDead returns the dead letters matching the request's filter
// (policy, key, reason; at most limit, by default defaultLimit), or answers
// the request itself with what is wrong and returns false.
func (s *Shaper) matchingDead(w http.ResponseWriter, r *http.Request, defaultLimit int) ([]DeadLetter, bool) {
	q := r.URL.Query()
	f := deadFilter{policy: q.Get("policy"), key: q.Get("key"), reason: q.Get("reason"), limit: defaultLimit}
	bad := func(code int, msg string) ([]DeadLetter, bool) {
		writeOutcome(w, failed(code, msg))
		return nil, false
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return bad(http.StatusBadRequest, "limit "+quote(v)+": want a positive number")
		}
		f.limit = n
	}
	if f.policy != "" && s.runtime(f.policy) == nil {
		return bad(http.StatusNotFound, "unknown policy "+quote(f.policy))
	}
	switch f.reason {
	case "", drain.ReasonAttempts, drain.ReasonDeadline, drain.ReasonDelivery:
	default:
		return bad(http.StatusBadRequest, "reason "+quote(f.reason)+": want attempts, deadline or delivery")
	}
	if f.key != "" {
		if err := queue.CheckKey(f.key); err != nil {
			return bad(http.StatusBadRequest, err.Error())
		}
	}
	out := []DeadLetter{}
	err := s.deadLetters(r.Context(), f, func(d DeadLetter) bool {
		out = append(out, d)
		return len(out) < f.limit
	})
	if err != nil {
		writeOutcome(w, unavailable("backend", err))
		return nil, false
	}
	return out, true
}

// deadCount returns how many dead letters policy has.
func (s *Shaper) deadCount(ctx context.Context, policy string) uint64 {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	stream, err := s.js.Stream(ctx, deadStream(policy))
	if err != nil {
		return 0
	}
	return stream.CachedInfo().State.Msgs
}
