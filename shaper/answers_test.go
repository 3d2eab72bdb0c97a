package shaper_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// answer sends a request to the shaper and returns its status, headers and
// body decoded as JSON.
func (r *running) answer(t *testing.T, method, path, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Errorf("%s %s: body is not JSON: %q", method, path, raw)
	}
	return resp.StatusCode, resp.Header, m
}

// Every error the API gives is a problem+json; a 404 for a policy names the
// policies there are, and the one a typo was probably meant to be; deferred is said in 429s only; details say a thing once.
func TestAnswers(t *testing.T) {
	r := start(t, `
policies:
  - name: orders
    outflow: 1/h
    queue: 1
  - name: later
    outflow: 1/h
    queue: 1
    overflow: defer
`)
	const known = `known: later, orders (did you mean "orders"?)` // the hint ends the message
	for _, c := range []struct {
		method, path, body string
		code               int
		detail, allow      string
	}{
		{"POST", "/v1/jobs/ordrs/k", "x", 404, `unknown policy "ordrs"; ` + known, ""},
		{"GET", "/v1/policies/ordrs", "", 404, `unknown policy "ordrs"; ` + known, ""},
		{"PUT", "/v1/policies/ordrs", `{"queue": 5}`, 404, `unknown policy "ordrs"; ` + known, ""},
		{"GET", "/v1/dead?policy=ordrs", "", 404, `unknown policy "ordrs"; ` + known, ""},
		{"PUT", "/v1/policies/orders", `{"queue": -1}`, 400, `policy "orders": queue: -1`, ""},
		{"DELETE", "/v1/jobs/some-id", "", 405, `method DELETE not allowed on "/v1/jobs/some-id"`, "GET, HEAD, POST"},
		{"PATCH", "/v1/policies", "", 405, "not allowed", "GET, HEAD"},
		{"GET", "/v2/nothing", "", 404, `no route GET "/v2/nothing"`, ""},
		{"POST", "/v1/jobs/orders/%FF", "x", 400, "not valid UTF-8", ""},
	} {
		code, h, body := r.answer(t, c.method, c.path, c.body)
		detail, _ := body["detail"].(string)
		if code != c.code || !strings.Contains(detail, c.detail) || strings.Count(detail, `policy "orders"`) > 1 {
			t.Errorf("%s %s = %d %q, want %d saying %q", c.method, c.path, code, detail, c.code, c.detail)
		}
		if ct := h.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s %s: Content-Type %q, want application/problem+json", c.method, c.path, ct)
		}
		if got := h.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
		if _, ok := body["deferred"]; ok {
			t.Errorf("%s %s = %d says deferred: %v", c.method, c.path, code, body)
		}
	}
	// The 429s say whether the job was kept.
	r.post(t, "orders", "k", []byte("1"))
	r.post(t, "later", "k", []byte("1"))
	time.Sleep(10 * time.Millisecond)
	for _, c := range []struct {
		policy string
		kept   bool
	}{{"orders", false}, {"later", true}} {
		code, _, body := r.answer(t, "POST", "/v1/jobs/"+c.policy+"/k", "2")
		if code != http.StatusTooManyRequests || body["deferred"] != c.kept {
			t.Errorf("POST to the full key of %s = %d %v, want 429 with deferred %v", c.policy, code, body, c.kept)
		}
	}
	// So do NATS replies: an unknown policy names the known ones (and the
	// nearest), and only
	// refusals say deferred.
	reply, err := r.nc.Request("shaper.submit.ordrs.k", []byte("x"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var a map[string]any
	json.Unmarshal(reply.Data, &a)
	if a["code"] != 404.0 || !strings.Contains(a["error"].(string), known) || a["deferred"] != nil {
		t.Errorf("NATS submission to an unknown policy = %s, want 404 naming the known policies, without deferred", reply.Data)
	}
}

// A key's queue made smaller than the jobs it holds, live: a 429's
// Retry-After is when enough of them left for the key to have room, by the
// drain's schedule — not the key's next slot, after which it is still
// full. A submission just before it is refused; one just after, taken.
func TestRetryAfterOfAShrunkQueue(t *testing.T) {
	r := start(t, `
policies:
  - name: s
    outflow: 5/s
    queue: 30
    overflow: reject
`)
	collect(t, r.nc, "shaper.out.s.>")
	for i := range 20 {
		if a := r.post(t, "s", "k", []byte(fmt.Sprint(i))); a.code != http.StatusAccepted {
			t.Fatalf("POST #%d = %d %v", i, a.code, a.body)
		}
	}
	if code, _, body := r.answer(t, "PUT", "/v1/policies/s", `{"queue": 5}`); code != http.StatusOK {
		t.Fatalf("PUT queue 5 = %d %v", code, body)
	}
	a := r.post(t, "s", "k", []byte("late"))
	asked := time.Now()
	ra, _ := a.body["retry_after_ms"].(float64)
	// About 16 of the 20 jobs must leave first: some 3 s at 5/s.
	if a.code != http.StatusTooManyRequests || ra < 2000 {
		t.Fatalf("POST to the shrunk key = %d, retry_after_ms %v, want 429 with the time until 16 jobs left (about 3 s): %v", a.code, ra, a.body)
	}
	room := asked.Add(time.Duration(ra) * time.Millisecond)
	time.Sleep(time.Until(room.Add(-150 * time.Millisecond)))
	if early := r.post(t, "s", "k", []byte("early")); early.code != http.StatusTooManyRequests {
		t.Errorf("POST 150 ms before the Retry-After = %d, want 429: the key had room earlier than said", early.code)
	}
	time.Sleep(time.Until(room.Add(60 * time.Millisecond)))
	if on := r.post(t, "s", "k", []byte("on time")); on.code != http.StatusAccepted {
		t.Errorf("POST 60 ms after the Retry-After (%v ms) = %d %v, want 202", ra, on.code, on.body)
	}
}
