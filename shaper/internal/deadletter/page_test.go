package deadletter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/deadletter"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/listing"
)

// rig is a dead-letter Store on a real in-process JetStream, with its
// routes.
type rig struct {
	srv  *server.Server
	js   jetstream.JetStream
	dead *deadletter.Store
	http *httptest.Server
}

func newRig(t *testing.T, policies ...string) *rig {
	t.Helper()
	r := &rig{srv: testenv.NATS(t)}
	var err error
	if r.js, err = jetstream.New(testenv.Connect(t, r.srv)); err != nil {
		t.Fatal(err)
	}
	r.dead = deadletter.New(r.js, deadletter.Config{
		Policies: func() []string { return policies },
		Replay: func(context.Context, string, string, []byte, nats.Header, string) (string, bool, string) {
			return "", false, ""
		},
	})
	for _, p := range policies {
		if err := r.dead.Open(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	mux := httpapi.NewMux()
	r.dead.Routes(mux, httpapi.Open)
	r.http = httptest.NewServer(mux)
	t.Cleanup(r.http.Close)
	return r
}

// bury dead-letters n jobs of policy, of keys k0…k4 in turn, every tenth
// for its deadline and the others after their attempts.
func (r *rig) bury(t *testing.T, policy string, n int) {
	t.Helper()
	bury := r.dead.Func(policy, deadletter.FromQueue)
	for i := range n {
		key := fmt.Sprint("k", i%5)
		token, _ := queue.EncodeKey(key)
		reason := drain.ReasonAttempts
		if i%10 == 9 {
			reason = drain.ReasonDeadline
		}
		m := &queue.Msg{Seq: uint64(i + 1), Token: token, Job: queue.Job{ID: fmt.Sprintf("%s-%d", policy, i), Key: key,
			Payload: []byte(strings.Repeat("x", 1000)), Attempt: 4}}
		if err := bury(t.Context(), m, reason, []string{"failed"}); err != nil {
			t.Fatal(err)
		}
	}
}

// page is one answer of GET /v1/dead.
type page struct {
	code int
	Dead []deadletter.Letter
	Next *string
	// Detail is a problem's.
	Detail string
}

func (r *rig) list(t *testing.T, query url.Values) page {
	t.Helper()
	resp, err := http.Get(r.http.URL + "/v1/dead?" + query.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := page{code: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// all follows the pages of query from the first to the one without a
// next, and returns the size of each and every letter.
func (r *rig) all(t *testing.T, query url.Values) (sizes []int, letters []deadletter.Letter) {
	t.Helper()
	for {
		p := r.list(t, query)
		if p.code != http.StatusOK {
			t.Fatalf("GET /v1/dead?%s = %d %s", query.Encode(), p.code, p.Detail)
		}
		sizes = append(sizes, len(p.Dead))
		letters = append(letters, p.Dead...)
		if p.Next == nil {
			return sizes, letters
		}
		if *p.Next == "" || len(sizes) > 100 {
			t.Fatalf("pages %v, then next %q", sizes, *p.Next)
		}
		query.Set("after", *p.Next)
	}
}

// inOrder fails the test unless letters are those of want (policy, count)
// in turn, each policy's by sequence from 1, each listed once.
func inOrder(t *testing.T, letters []deadletter.Letter, want ...any) {
	t.Helper()
	i := 0
	for w := 0; w < len(want); w += 2 {
		policy, n := want[w].(string), want[w+1].(int)
		for seq := uint64(1); seq <= uint64(n); seq++ {
			if i >= len(letters) {
				t.Fatalf("%d letters listed, want %v", len(letters), want)
			}
			if d := letters[i]; d.Policy != policy || d.Seq != seq || d.Size != 1000 || d.ID != fmt.Sprintf("%s-%d", policy, seq-1) {
				t.Fatalf("letter %d listed is %+v, want %s's of sequence %d, 1000 bytes", i, d, policy, seq)
			}
			i++
		}
	}
	if i != len(letters) {
		t.Fatalf("%d letters listed, want %d", len(letters), i)
	}
}

// 250 dead letters list in pages of 100: 100, 100, 50 and no next; over
// every policy the pages run on from one policy's letters to the next's;
// filters page alike, and a page reads about what it holds, not every
// letter kept.
func TestDeadLettersPage(t *testing.T) {
	r := newRig(t, "p", "a", "empty")
	r.bury(t, "p", 250)
	r.bury(t, "a", 30)

	sizes, letters := r.all(t, url.Values{"policy": {"p"}, "limit": {"100"}})
	if fmt.Sprint(sizes) != "[100 100 50]" {
		t.Errorf("policy p in pages of 100: %v, want [100 100 50]", sizes)
	}
	inOrder(t, letters, "p", 250)

	sizes, letters = r.all(t, url.Values{"limit": {"100"}})
	if fmt.Sprint(sizes) != "[100 100 80]" {
		t.Errorf("every policy in pages of 100: %v, want [100 100 80]", sizes)
	}
	inOrder(t, letters, "a", 30, "p", 250)

	// A page that ends with a policy's last letter points at the next
	// policy's.
	sizes, letters = r.all(t, url.Values{"limit": {"30"}})
	if len(sizes) != 10 || sizes[0] != 30 || sizes[9] != 10 {
		t.Errorf("every policy in pages of 30: %v, want 9 of 30 and one of 10", sizes)
	}
	inOrder(t, letters, "a", 30, "p", 250)

	if p := r.list(t, url.Values{"policy": {"p"}}); len(p.Dead) != 100 || p.Next == nil {
		t.Errorf("no limit: %d letters, next %v; want the default, 100, and a next", len(p.Dead), p.Next)
	}
	if p := r.list(t, url.Values{"policy": {"empty"}}); p.code != http.StatusOK || len(p.Dead) != 0 || p.Next != nil {
		t.Errorf("a policy without letters: %d, %d letters, next %v; want 200, none, no next", p.code, len(p.Dead), p.Next)
	}

	// The key is a subject: its pages are full.
	sizes, letters = r.all(t, url.Values{"policy": {"p"}, "key": {"k3"}, "limit": {"20"}})
	if fmt.Sprint(sizes) != "[20 20 10]" {
		t.Errorf("key k3 in pages of 20: %v, want [20 20 10]", sizes)
	}
	for _, d := range letters {
		if d.Key != "k3" {
			t.Fatalf("key k3's listing holds %+v", d)
		}
	}
	// A reason is read from each letter: a page reads at most ten times
	// its limit, so it may end short, and the pages still list each
	// matching letter once.
	sizes, letters = r.all(t, url.Values{"reason": {"deadline"}, "limit": {"5"}})
	if len(letters) != 28 || len(sizes) < 6 {
		t.Errorf("reason deadline in pages of 5: %d letters in pages %v, want the 28 of reason deadline, some pages short", len(letters), sizes)
	}
	seen := map[string]bool{}
	for _, d := range letters {
		if d.Reason != drain.ReasonDeadline || seen[d.ID] {
			t.Fatalf("reason deadline's listing holds %+v (again?)", d)
		}
		seen[d.ID] = true
	}

	// A page of 10 of the 250 takes about 10 letters off the server, and
	// leaves no consumer behind.
	before, _ := r.srv.Varz(nil)
	r.list(t, url.Values{"policy": {"p"}, "limit": {"10"}, "after": {listing.Cursor{Policy: "p", Seq: 100}.String()}})
	after, _ := r.srv.Varz(nil)
	if n := after.OutMsgs - before.OutMsgs; n > 40 {
		t.Errorf("a page of 10 letters sent %d messages from the server, want about 10 (it reads what the page holds)", n)
	}
	stream, err := r.js.Stream(t.Context(), deadletter.Stream("p"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := stream.Info(t.Context()); err != nil || info.State.Consumers != 0 {
		t.Errorf("consumers left on the stream: %v, %v; want none", info.State.Consumers, err)
	}
}

// A bad limit or cursor is a 400 saying what is wrong.
func TestDeadLettersPageRefused(t *testing.T) {
	r := newRig(t, "p", "a")
	r.bury(t, "p", 3)
	for _, c := range []struct {
		query url.Values
		want  string
	}{
		{url.Values{"limit": {"0"}}, "limit"},
		{url.Values{"limit": {"-3"}}, "limit"},
		{url.Values{"limit": {"1001"}}, "from 1 to 1000"},
		{url.Values{"limit": {"ten"}}, "limit"},
		{url.Values{"after": {"!!"}}, "not a cursor"},
		{url.Values{"after": {"Zm9v"}}, "not a cursor"}, // base64 of "foo"
		{url.Values{"policy": {"p"}, "after": {listing.Cursor{Policy: "a", Seq: 1}.String()}}, "a cursor of policy"},
	} {
		p := r.list(t, c.query)
		if p.code != http.StatusBadRequest || !strings.Contains(p.Detail, c.want) {
			t.Errorf("GET /v1/dead?%s = %d %q, want 400 saying %q", c.query.Encode(), p.code, p.Detail, c.want)
		}
	}
}
