package shaper_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Jobs that cannot be delivered before their retry.deadline — queued ones
// whose webhook keeps refusing, deferred ones whose queue stays full — end
// in the dead-letter stream with reason, history and payload; replay brings
// them back through the normal path and they are delivered once there is room.
func TestDeadLetterAndReplay(t *testing.T) {
	h := newHook(t)
	var down atomic.Bool
	down.Store(true)
	h.set(func(key string) (int, string) {
		if down.Load() {
			return http.StatusServiceUnavailable, "1"
		}
		return http.StatusOK, ""
	})
	r := start(t, fmt.Sprintf(`
policies:
  - name: d
    outflow: 10/s
    queue: 2
    overflow: defer
    retry: {attempts: 2, deadline: 2s, backoff: 100ms, max_backoff: 500ms}
    deliver: {webhook: %q}
`, h.srv.URL))
	deferred := 0
	for i := range 6 {
		if a := r.post(t, "d", "k", []byte(fmt.Sprint("j", i))); a.body["deferred"] == true {
			deferred++
		}
	}
	if deferred != 4 {
		t.Fatalf("%d of 6 jobs deferred, want 4 (queue 2)", deferred)
	}
	var dead []map[string]any
	waitFor(t, "6 dead letters", 15*time.Second, func() bool {
		resp, err := http.Get(r.base + "/v1/dead?policy=d")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct{ Dead []map[string]any }
		json.NewDecoder(resp.Body).Decode(&body)
		dead = body.Dead
		return len(dead) == 6
	})
	for _, d := range dead {
		hist, _ := d["history"].([]any)
		if d["key"] != "k" || (d["reason"] != "deadline" && d["reason"] != "attempts") || d["id"] == "" || len(hist) == 0 {
			t.Errorf("dead letter %v, want key k, reason deadline or attempts, an id and a history", d)
		}
	}
	// show carries the payload; the job record says dead.
	resp, err := http.Get(fmt.Sprintf("%s/v1/dead/d/%v", r.base, dead[0]["seq"]))
	if err != nil {
		t.Fatal(err)
	}
	var one map[string]any
	json.NewDecoder(resp.Body).Decode(&one)
	resp.Body.Close()
	if p, _ := one["payload"].(string); !strings.HasPrefix(p, "j") {
		t.Errorf("GET /v1/dead/d/%v = %v, want the payload", dead[0]["seq"], one)
	}
	resp, _ = http.Get(r.base + "/v1/jobs/" + dead[0]["id"].(string))
	var rec map[string]any
	json.NewDecoder(resp.Body).Decode(&rec)
	resp.Body.Close()
	if rec["status"] != "dead" || rec["reason"] == "" {
		t.Errorf("job record of a dead job = %v, want status dead with a reason", rec)
	}
	// One that was attempted says what its last attempt met, as api.md
	// promises (a tour found no last_error).
	checked := 0
	for _, d := range dead {
		if d["attempts"] == 0.0 {
			continue
		}
		_, rec := jobStatus(t, r.base, d["id"].(string))
		if e, _ := rec["last_error"].(string); !strings.Contains(e, "503 Service Unavailable") {
			t.Errorf("job record of a dead job attempted %v times = %v, want its last error (the webhook's 503)", d["attempts"], rec)
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("no dead letter was attempted, among %v", dead)
	}
	if st := r.Status()[0]; st.Dead != 6 {
		t.Errorf("status dead = %d, want 6", st.Dead)
	}
	if n := h.total(); n != 0 {
		t.Fatalf("%d deliveries while the webhook refused", n)
	}
	refusedUntouched(t, r)
	down.Store(false)
	resp, err = http.Post(r.base+"/v1/dead/replay?policy=d", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Matched, Done int }
	json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if rep.Matched != 6 || rep.Done != 6 {
		t.Errorf("replay = %+v, want 6 matched and done", rep)
	}
	waitFor(t, "replayed jobs delivered", 15*time.Second, func() bool { return h.total() == 6 })
	got := map[string]bool{}
	for _, hh := range h.hits("k") {
		got[hh.body] = true
	}
	for i := range 6 {
		if !got[fmt.Sprint("j", i)] {
			t.Errorf("job j%d never delivered after replay", i)
		}
	}
	if st := r.Status()[0]; st.Dead != 0 {
		t.Errorf("status dead after replay = %d, want 0", st.Dead)
	}
}

// A bad dead-letter filter is refused, for listing and for changes alike.
func TestDeadFilterRefused(t *testing.T) {
	r := start(t, burstPolicy)
	long := strings.Repeat("k", 300)
	for _, c := range []struct {
		method, query string
		code          int
	}{
		{"GET", "limit=0", http.StatusBadRequest},
		{"GET", "limit=many", http.StatusBadRequest},
		{"GET", "policy=nope", http.StatusNotFound},
		{"GET", "reason=bored", http.StatusBadRequest},
		{"GET", "key=" + long, http.StatusBadRequest},
		{"DELETE", "reason=bored", http.StatusBadRequest},
		{"POST", "policy=nope", http.StatusNotFound},
		{"GET", "policy=burst&reason=deadline&limit=5", http.StatusOK},
	} {
		path := "/v1/dead?" + c.query
		if c.method == "POST" {
			path = "/v1/dead/replay?" + c.query
		}
		req, _ := http.NewRequest(c.method, r.base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s %s = %d, want %d", c.method, path[:min(len(path), 60)], resp.StatusCode, c.code)
		}
	}
}

// refusedUntouched: a purge or replay whose filters come in a JSON body,
// or under a mistyped name, is refused and touches nothing; read as no
// filter, either would act on every policy's dead letters.
func refusedUntouched(t *testing.T, r *running) {
	t.Helper()
	for _, c := range []struct{ method, path, body, want string }{
		{"DELETE", "/v1/dead", `{"policy":"other"}`, "this route takes no body: its filters are query parameters"},
		{"POST", "/v1/dead/replay", `{"policy":"other"}`, "nothing was replayed"},
		// Longer than the server reads (a tour's 2 MiB body purged
		// everything once: the route saw it as empty).
		{"DELETE", "/v1/dead", `{"policy":"other",` + strings.Repeat(" ", 2<<20) + `}`, "nothing was purged"},
		{"POST", "/v1/dead/replay", strings.Repeat(" ", 2<<20), "nothing was replayed"},
		{"DELETE", "/v1/dead?polcy=other", "", `unknown parameter "polcy": this route takes policy, key, reason, limit (did you mean "policy"?)`},
		{"POST", "/v1/dead/replay?policy=d&after=x", "", `unknown parameter "after"`},
		{"GET", "/v1/dead?keys=k", "", `unknown parameter "keys"`},
		{"GET", "/v1/deferred?polcy=d", "", `unknown parameter "polcy": this route takes policy, key, limit, after`},
		{"DELETE", "/v1/dead?policy=d&key=a&key=b", "", `parameter "key" given 2 times: give it once`},
		{"GET", "/v1/dead?limit=1&limit=1000", "", `parameter "limit" given 2 times`},
	} {
		req, _ := http.NewRequest(c.method, r.base+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Detail string }
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(p.Detail, c.want) {
			t.Errorf("%s %s with %.40q = %d %q, want 400 saying %q", c.method, c.path, c.body, resp.StatusCode, p.Detail, c.want)
		}
	}
	if st := r.Status()[0]; st.Dead != 6 {
		t.Errorf("status dead after refused purges and replays = %d, want 6 still", st.Dead)
	}
}

// A replayed dead letter is delivered in the trace its job was in: the
// producer's trace id and tracestate (a tour saw the replay start a new,
// unsampled trace, without tracestate, losing the job in its trace), and
// names the dead job it replays (Shaper-Replay-Of), for a consumer that did
// the work but answered too late to tell it by its id.
func TestReplayKeepsTheJobsTrace(t *testing.T) {
	h := newHook(t)
	var down atomic.Bool
	down.Store(true)
	h.set(func(string) (int, string) {
		if down.Load() {
			return http.StatusInternalServerError, ""
		}
		return http.StatusOK, ""
	})
	r := start(t, fmt.Sprintf("policies:\n  - {name: d, outflow: 10/s, queue: 2, retry: {attempts: 1}, deliver: {webhook: %q}}\n", h.srv.URL))
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	a := r.post(t, "d", "k", []byte("x"), "traceparent", "00-"+traceID+"-b7ad6b7169203331-01", "tracestate", "vendor=x", "Shaper-Replay-Of", "forged")
	if a.code != http.StatusAccepted {
		t.Fatalf("submission = %d %v", a.code, a.body)
	}
	waitFor(t, "the dead letter", 10*time.Second, func() bool { return r.Status()[0].Dead == 1 })
	down.Store(false)
	resp, err := http.Post(r.base+"/v1/dead/replay?policy=d", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitFor(t, "the replay's delivery", 10*time.Second, func() bool { return h.total() == 1 })
	h.mu.Lock()
	got := h.got["k"][0]
	h.mu.Unlock()
	if !strings.HasPrefix(got.trace, "00-"+traceID+"-") || !strings.HasSuffix(got.trace, "-01") || got.tracestate != "vendor=x" {
		t.Errorf("replay delivered with traceparent %q, tracestate %q; want the job's trace %s, sampled, and vendor=x", got.trace, got.tracestate, traceID)
	}
	if got.replayOf != a.body["id"] || got.id == a.body["id"] {
		t.Errorf("replay delivered as %s with Shaper-Replay-Of %q, want a new id and %v", got.id, got.replayOf, a.body["id"])
	}
}
