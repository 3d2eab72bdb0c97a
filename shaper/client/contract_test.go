package client_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/client"
)

// roundTrip decodes raw, an answer of a real shaper, into a T knowing every
// field, encodes it again and wants raw back byte for byte: the type has the
// contract's field names, order and omitempty behaviour.
func roundTrip[T any](t *testing.T, what string, raw []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Errorf("%s: decoding %T: %v\n%s", what, v, err, raw)
		return v
	}
	got, err := json.Marshal(v)
	if err != nil {
		t.Errorf("%s: encoding %T: %v", what, v, err)
		return v
	}
	if want := bytes.TrimSpace(raw); !bytes.Equal(got, want) {
		t.Errorf("%s: %T encodes as\n%s\nwant the shaper's\n%s", what, v, got, want)
	}
	return v
}

// raw does a request to the shaper by hand, with header (name, value, …),
// and returns the answer's body.
func raw(t *testing.T, method, url string, body string, wantCode int, header ...string) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantCode {
		t.Fatalf("%s %s = %d %s, want %d", method, url, resp.StatusCode, b, wantCode)
	}
	return b
}

// The contract's types are the shaper's JSON, field for field.
func TestContractTypes(t *testing.T) {
	hook := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	e := start(t, testPolicies+fmt.Sprintf(`
  - name: hooks
    outflow: 100/s
    queue: 10
    total: 500/s
    retry: {attempts: 1, backoff: 10ms, max_backoff: 10ms}
    deliver: {webhook: %q, timeout: 2s}
    admit: {algorithm: token_bucket, limit: 600/m, burst: 10, shadow: true}
`, hook))
	jobs := e.base + "/v1/jobs/"

	accepted := roundTrip[client.Accepted](t, "202", raw(t, "POST", jobs+"open/k", "x", 202))
	raw(t, "POST", jobs+"open/d", "x", 202, client.HeaderIdempotencyKey, "i")
	dup := raw(t, "POST", jobs+"open/d", "x", 202, client.HeaderIdempotencyKey, "i")
	if a := roundTrip[client.Accepted](t, "202 duplicate", dup); !a.Duplicate {
		t.Errorf("the resubmission is no duplicate: %s", dup)
	}
	fillTight(t, e.c, "full")
	roundTrip[client.Problem](t, "429 full", raw(t, "POST", jobs+"tight/full", "x", 429))
	raw(t, "POST", jobs+"later/k", "x", 202)
	deferred := roundTrip[client.Problem](t, "429 deferred", raw(t, "POST", jobs+"later/k", "x", 429))
	raw(t, "POST", jobs+"admit/k", "x", 202)
	roundTrip[client.Problem](t, "429 limited", raw(t, "POST", jobs+"admit/k", "x", 429))
	roundTrip[client.Problem](t, "404", raw(t, "POST", jobs+"nope/k", "x", 404))
	roundTrip[client.Problem](t, "400", raw(t, "POST", jobs+"open/%FF", "x", 400))

	roundTrip[client.Job](t, "job queued", raw(t, "GET", jobs+accepted.ID, "", 200))
	roundTrip[client.Job](t, "job deferred", raw(t, "GET", jobs+deferred.ID, "", 200))

	for _, c := range []struct{ subject, want string }{
		{"shaper.submit.open.n", "queued"},
		{"shaper.submit.tight.full", "rejected"},
		{"shaper.submit.later.k", "deferred"},
		{"shaper.submit.admit.k", "rejected"},
		{"shaper.submit.nope.k", "error"},
		{"shaper.submit.open.~~", "error"},
	} {
		m, err := e.nc.Request(c.subject, []byte("x"), 5*time.Second)
		if err != nil {
			t.Fatalf("request %s: %v", c.subject, err)
		}
		if r := roundTrip[client.Reply](t, "NATS reply of "+c.subject, m.Data); r.Status.String() != c.want {
			t.Errorf("NATS reply of %s: status %v, want %s", c.subject, r.Status, c.want)
		}
	}

	mustSubmit(t, e.c, "hooks", "dead", client.OutcomeAccepted)
	type policyList struct {
		Policies []client.Policy        `json:"policies"`
		Removed  []client.RemovedPolicy `json:"removed"`
	}
	roundTrip[policyList](t, "policies", raw(t, "GET", e.base+"/v1/policies", "", 200))
	roundTrip[client.Policy](t, "policy", raw(t, "GET", e.base+"/v1/policies/hooks", "", 200))
	roundTrip[client.Policy](t, "policy tuned", raw(t, "PUT", e.base+"/v1/policies/open", `{"queue": 5}`, 200))
	roundTrip[client.Health](t, "healthz", raw(t, "GET", e.base+"/healthz", "", 200))

	type deadList struct {
		Dead []client.DeadLetter `json:"dead"`
	}
	var list deadList
	for deadline := time.Now().Add(20 * time.Second); len(list.Dead) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no dead letter after 20s")
		}
		list = roundTrip[deadList](t, "dead letters", raw(t, "GET", e.base+"/v1/dead", "", 200))
	}
	roundTrip[client.DeadLetter](t, "dead letter", raw(t, "GET", fmt.Sprintf("%s/v1/dead/hooks/%d", e.base, list.Dead[0].Seq), "", 200))
	roundTrip[client.Job](t, "job dead", raw(t, "GET", jobs+list.Dead[0].ID, "", 200))
	roundTrip[client.DeadReport](t, "replay", raw(t, "POST", e.base+"/v1/dead/replay", "", 200))
	if j := roundTrip[client.Job](t, "job replayed", raw(t, "GET", jobs+list.Dead[0].ID, "", 200)); j.Status != client.JobReplayed || j.ReplayedAs == "" {
		t.Errorf("the replayed dead letter's job: %+v, want status replayed naming its new id", j)
	}

	if _, err := e.c.Submit(t.Context(), "hooks", "binary", []byte{0xff, 0, 0xfe}); err != nil {
		t.Fatal(err)
	}
	var shown client.DeadLetter
	for deadline := time.Now().Add(20 * time.Second); shown.PayloadBinary == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no binary dead letter after 20s")
		}
		l, err := e.c.DeadLetters(t.Context(), client.DeadFilter{Key: "binary"})
		if err != nil || len(l) == 0 {
			continue
		}
		shown = roundTrip[client.DeadLetter](t, "binary dead letter", raw(t, "GET", fmt.Sprintf("%s/v1/dead/hooks/%d", e.base, l[0].Seq), "", 200))
	}
	roundTrip[client.DeadReport](t, "purge", raw(t, "DELETE", e.base+"/v1/dead", "", 200))
}

// The enums marshal to the contract's strings and refuse others.
func TestStatusText(t *testing.T) {
	for _, c := range []struct {
		s    interface{ MarshalText() ([]byte, error) }
		want string
	}{
		{client.ReplyQueued, "queued"}, {client.ReplyRejected, "rejected"}, {client.ReplyDeferred, "deferred"}, {client.ReplyError, "error"},
		{client.JobQueued, "queued"}, {client.JobDeferred, "deferred"}, {client.JobDelivered, "delivered"}, {client.JobDead, "dead"}, {client.JobReplayed, "replayed"}, {client.JobDuplicate, "duplicate"},
	} {
		b, err := c.s.MarshalText()
		if err != nil || string(b) != c.want || fmt.Sprint(c.s) != c.want {
			t.Errorf("%#v: MarshalText = %q, %v, String %q; want %q", c.s, b, err, fmt.Sprint(c.s), c.want)
		}
	}
	var r client.ReplyStatus
	var j client.JobStatus
	if r.UnmarshalText([]byte("dead")) == nil || j.UnmarshalText([]byte("rejected")) == nil || j.UnmarshalText(nil) == nil {
		t.Error("UnmarshalText took a status of the other set, or none")
	}
	if _, err := client.ReplyStatus(0).MarshalText(); err == nil {
		t.Error("the zero ReplyStatus marshals")
	}
	if _, err := json.Marshal(client.Job{}); err == nil {
		t.Error("a Job without a status marshals")
	}
}
