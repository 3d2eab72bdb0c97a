package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/suggest"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
	"github.com/shaper-dev/shaper/shaper/internal/listing"
)

// Letter is one dead-lettered job as the API shows it.
type Letter struct {
	Seq      uint64    `json:"seq"`
	Policy   string    `json:"policy"`
	Key      string    `json:"key"`
	ID       string    `json:"id"`
	Reason   string    `json:"reason"`
	From     From      `json:"from"`
	At       time.Time `json:"at"`
	Attempts int       `json:"attempts"`
	History  []string  `json:"history"`
	Size     int       `json:"size"`
	Payload  *string   `json:"payload,omitempty"` // with show: the payload, when it is UTF-8 text
	Bytes    []byte    `json:"payload_base64,omitempty"`

	data   []byte
	header nats.Header // the letter's headers: its job's trace context, which its replay goes on in
}

// reasons are the reasons a job is dead-lettered with.
var reasons = []string{drain.ReasonAttempts, drain.ReasonDeadline, drain.ReasonDelivery, drain.ReasonUndecodable}

// filter selects dead letters.
type filter struct {
	policy, key, reason string
	token               string // the key's subject token ("" without a key)
	limit               int
}

func (f filter) match(d Letter) bool {
	return (f.key == "" || d.Key == f.key) && (f.reason == "" || d.Reason == f.reason)
}

// Routes adds the dead-letter routes to mux:
//
//	GET    /v1/dead?policy=&key=&reason=&limit=&after=   a page of dead letters
//	GET    /v1/dead/{policy}/{seq}                one, with its payload
//	POST   /v1/dead/replay?policy=&key=&reason=   submit them again
//	DELETE /v1/dead?policy=&key=&reason=          purge them
//
// Every one of them is behind guard: dead letters are the operators'.
func (s *Store) Routes(mux *httpapi.Mux, guard httpapi.Guard) {
	mux.HandleFunc("GET /v1/dead", guard(s.handleList))
	mux.HandleFunc("GET /v1/dead/{policy}/{seq}", guard(s.handleShow))
	mux.HandleFunc("POST /v1/dead/replay", guard(s.handleReplay))
	mux.HandleFunc("DELETE /v1/dead", guard(s.handlePurge))
}

// each walks the dead letters of f.policy (or every policy) in order and
// calls fn for each match until fn returns false.
func (s *Store) each(ctx context.Context, f filter, fn func(Letter) bool) error {
	names := []string{f.policy}
	if f.policy == "" {
		names = s.cfg.Policies()
	}
	for _, name := range names {
		stream, err := s.js.Stream(ctx, Stream(name))
		if err != nil {
			return err
		}
		if stream.CachedInfo().State.Msgs == 0 {
			continue
		}
		cfg := jetstream.OrderedConsumerConfig{}
		if f.token != "" {
			cfg.FilterSubjects = []string{subject(name, f.token)}
		}
		cons, err := s.js.OrderedConsumer(ctx, Stream(name), cfg)
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
				d := decode(name, m.Headers(), m.Data(), md)
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

func decode(policy string, h nats.Header, data []byte, md *jetstream.MsgMetadata) Letter {
	d := Letter{Policy: policy, Key: h.Get(queue.HeaderKey), ID: h.Get(queue.HeaderJobID),
		Reason: h.Get(HeaderReason), From: From(h.Get(HeaderFrom)), Size: len(data), data: data, header: h}
	if md != nil {
		d.Seq = md.Sequence.Stream
	}
	d.At, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderAt))
	d.Attempts, _ = strconv.Atoi(h.Get(queue.HeaderAttempt))
	json.Unmarshal([]byte(h.Get(HeaderHistory)), &d.History)
	return d
}

func (s *Store) known(policy string) bool { return slices.Contains(s.cfg.Policies(), policy) }

// List is the body of GET /v1/dead: a page of dead letters, and the
// cursor of the next page (none after the last).
type List struct {
	Dead []Letter `json:"dead"`
	Next string   `json:"next,omitempty"`
}

// handleList serves GET /v1/dead?policy=&key=&reason=&limit=&after=: a
// page of dead letters, in order of policy and sequence. It reads from the
// cursor on, headers only, at most a page's worth of letters (ten pages'
// worth with a reason filter, which only reading a letter can tell), so a
// page costs the same however many letters are kept.
func (s *Store) handleList(w http.ResponseWriter, r *http.Request) {
	f, ok := s.filterOf(w, r, "limit", "after")
	if !ok {
		return
	}
	req, bad := listing.Parse(r.URL.Query())
	if bad == "" && f.policy != "" && req.After != (listing.Cursor{}) && req.After.Policy != f.policy {
		bad = "after " + httpapi.Quote(r.URL.Query().Get("after")) + ": a cursor of policy " + httpapi.Quote(req.After.Policy) + "'s dead letters, not " + httpapi.Quote(f.policy) + "'s"
	}
	if bad != "" {
		httpapi.Error(w, http.StatusBadRequest, bad)
		return
	}
	names := []string{f.policy}
	if f.policy == "" {
		names = s.cfg.Policies()
	}
	streams := listing.Streams{JS: s.js, Name: Stream}
	if f.token != "" {
		streams.Subject = func(policy string) string { return subject(policy, f.token) }
	}
	list := List{Dead: []Letter{}}
	next, err := streams.Page(r.Context(), names, req, func(policy string, m jetstream.Msg, md *jetstream.MsgMetadata) bool {
		d := decode(policy, m.Headers(), nil, md)
		d.Size = listing.Size(m)
		if !f.match(d) {
			return false
		}
		list.Dead = append(list.Dead, d)
		return true
	})
	if err != nil {
		httpapi.Unavailable(w, "backend", err)
		return
	}
	if next != nil {
		list.Next = next.String()
	}
	httpapi.WriteJSON(w, http.StatusOK, list)
}

// handleShow serves GET /v1/dead/{policy}/{seq}: one dead letter with its payload.
func (s *Store) handleShow(w http.ResponseWriter, r *http.Request) {
	policy := r.PathValue("policy")
	if !s.known(policy) {
		httpapi.Error(w, http.StatusNotFound, httpapi.UnknownPolicy(policy, s.cfg.Policies()))
		return
	}
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		httpapi.Error(w, http.StatusBadRequest, "bad sequence "+httpapi.Quote(r.PathValue("seq")))
		return
	}
	stream, err := s.js.Stream(r.Context(), Stream(policy))
	if err != nil {
		httpapi.Unavailable(w, "backend", err)
		return
	}
	raw, err := stream.GetMsg(r.Context(), seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		httpapi.Error(w, http.StatusNotFound, "no dead letter "+strconv.FormatUint(seq, 10)+" in policy "+httpapi.Quote(policy))
		return
	} else if err != nil {
		httpapi.Unavailable(w, "backend", err)
		return
	}
	d := decode(policy, raw.Header, raw.Data, nil)
	d.Seq = raw.Sequence
	if utf8.Valid(raw.Data) {
		text := string(raw.Data)
		d.Payload = &text
	} else {
		d.Bytes = raw.Data
	}
	httpapi.WriteJSON(w, http.StatusOK, d)
}

// handleReplay serves POST /v1/dead/replay?policy=&key=&reason=: each
// matching dead letter is submitted again through the normal admission path
// (as a new job id) and removed once that submission was kept (accepted, or
// deferred). The old job's record then says replayed, naming the new id;
// it is stored before the answer, so that every shaper answers the old id
// alike from then on.
func (s *Store) handleReplay(w http.ResponseWriter, r *http.Request) {
	s.apply(w, r, "replayed", func(ctx context.Context, d Letter) (string, bool, string) {
		id, kept, why := s.cfg.Replay(ctx, d.Policy, d.Key, d.data, d.header, d.ID)
		if kept {
			rec := jobs.Record{ID: d.ID, Policy: d.Policy, Key: d.Key, Status: jobs.Replayed, Reason: d.Reason, ReplayedAs: id,
				History: append(d.History, time.Now().UTC().Format(time.RFC3339Nano)+" replayed as "+id)}
			if d.From == FromDeferred {
				rec.Deferrals = d.Attempts
			} else {
				rec.Attempts = d.Attempts
			}
			if err := s.cfg.Jobs.Write(ctx, rec); err != nil {
				s.log.Warn("replayed dead letter's record not kept: its old id answers dead", "policy", d.Policy, "job", d.ID, "replayed_as", id, "err", err)
			}
		}
		return id, kept, why
	})
}

// handlePurge serves DELETE /v1/dead?policy=&key=&reason=.
func (s *Store) handlePurge(w http.ResponseWriter, r *http.Request) {
	s.apply(w, r, "purged", func(context.Context, Letter) (string, bool, string) { return "", true, "" })
}

// Result is what replay and purge say of each dead letter they matched.
type Result struct {
	Seq    uint64 `json:"seq"`
	Policy string `json:"policy"`
	ID     string `json:"id"`
	NewID  string `json:"new_id,omitempty"`
	Done   bool   `json:"done"`
	// Why says, of one not done, why: the shaper's answer to its
	// submission, or that it could not be removed.
	Why string `json:"why,omitempty"`
}

// apply runs fn over the matching dead letters and deletes each one fn
// says is done with; what says what it does to them ("purged"), for the
// answer to a request with a body, which it refuses: read as no filter,
// its filters would make it act on every policy's dead letters.
func (s *Store) apply(w http.ResponseWriter, r *http.Request, what string, fn func(context.Context, Letter) (newID string, ok bool, why string)) {
	if !httpapi.NoBody(w, r, "nothing was "+what) {
		return
	}
	matched, ok := s.matching(w, r)
	if !ok {
		return
	}
	res := []Result{}
	done := 0
	var touched []string // the policies whose count changes
	for _, d := range matched {
		if !slices.Contains(touched, d.Policy) {
			touched = append(touched, d.Policy)
		}
		newID, ok, why := fn(r.Context(), d)
		if ok {
			stream, err := s.js.Stream(r.Context(), Stream(d.Policy))
			if err == nil {
				err = stream.DeleteMsg(r.Context(), d.Seq)
			}
			if err != nil {
				ok, why = false, "not removed: "+err.Error()
				s.log.Warn("dead letter not removed", "policy", d.Policy, "seq", d.Seq, "err", err)
			}
		}
		if ok {
			done++
		}
		res = append(res, Result{Seq: d.Seq, Policy: d.Policy, ID: d.ID, NewID: newID, Done: ok, Why: why})
	}
	if len(touched) > 0 {
		s.Refresh(context.WithoutCancel(r.Context()), touched...)
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"matched": len(matched), "done": done, "results": res})
}

// matching returns the dead letters matching the request's filter (policy,
// key, reason; at most limit, by default every one), or answers the
// request itself with what is wrong and returns false.
func (s *Store) matching(w http.ResponseWriter, r *http.Request) ([]Letter, bool) {
	f, ok := s.filterOf(w, r, "limit")
	if !ok {
		return nil, false
	}
	f.limit = 1 << 30
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			httpapi.Error(w, http.StatusBadRequest, "limit "+httpapi.Quote(v)+": want a positive number")
			return nil, false
		}
		f.limit = n
	}
	out := []Letter{}
	err := s.each(r.Context(), f, func(d Letter) bool {
		out = append(out, d)
		return len(out) < f.limit
	})
	if err != nil {
		httpapi.Unavailable(w, "backend", err)
		return nil, false
	}
	return out, true
}

// filterOf returns the request's filter (policy, key, reason), or answers
// the request itself with what is wrong and returns false: a parameter
// other than those and params (a mistyped filter must not be read as no
// filter), an unknown policy or reason, a bad key.
func (s *Store) filterOf(w http.ResponseWriter, r *http.Request, params ...string) (filter, bool) {
	if !httpapi.Query(w, r, append([]string{"policy", "key", "reason"}, params...)...) {
		return filter{}, false
	}
	q := r.URL.Query()
	f := filter{policy: q.Get("policy"), key: q.Get("key"), reason: q.Get("reason")}
	bad := func(code int, msg string) (filter, bool) {
		httpapi.Error(w, code, msg)
		return f, false
	}
	if f.policy != "" && !s.known(f.policy) {
		return bad(http.StatusNotFound, httpapi.UnknownPolicy(f.policy, s.cfg.Policies()))
	}
	if f.reason != "" && !slices.Contains(reasons, f.reason) {
		return bad(http.StatusBadRequest, "reason "+httpapi.Quote(f.reason)+": want attempts, deadline, delivery or undecodable"+suggest.Hint(f.reason, reasons))
	}
	if f.key != "" {
		tok, err := queue.EncodeKey(f.key)
		if err != nil {
			return bad(http.StatusBadRequest, err.Error())
		}
		f.token = tok
	}
	return f, true
}
