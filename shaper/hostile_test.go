package shaper_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Every endpoint, fed hostile strings in every place a client controls
// (path parameters, query, headers, bodies): each answer is a 4xx (never a
// 5xx, never a hang), and the shaper still admits and delivers afterwards.
// A 10 KB job id once closed the shaper's NATS connection for good.
func TestHostileInputEverywhere(t *testing.T) {
	r := start(t, `
policies:
  - name: p
    outflow: 100/s
    queue: 5
    overflow: defer
`)
	hostile := []string{
		strings.Repeat("x", 10000), strings.Repeat("é", 5000), "a.b", "*", ">", "a.>", "$SYS.x",
		"with space", "\x00nul", "..", "%", "-", "~!!", "\r\nInjected: 1", "\xff\xfe",
	}
	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path string, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
		if err != nil {
			return 400, "not a request: " + err.Error() // the client refuses it: nothing reaches the shaper
		}
		for k, v := range hdr {
			req.Header[k] = []string{v}
		}
		resp, err := client.Do(req)
		if err != nil && strings.Contains(err.Error(), "invalid header field") {
			return 400, "not sent: " + err.Error() // the client refuses it: nothing reaches the shaper
		}
		if err != nil {
			t.Fatalf("%s %.60s: %.200v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, h := range hostile {
		e := url.PathEscape(h)
		q := url.QueryEscape(h)
		for _, c := range []struct {
			method, path, body string
			hdr                map[string]string
		}{
			{"GET", "/v1/jobs/" + e, "", nil},
			{"POST", "/v1/jobs/" + e + "/k", "x", nil},
			{"POST", "/v1/jobs/p/" + e, "x", nil},
			{"POST", "/v1/jobs/p/ok", "x", map[string]string{"Idempotency-Key": h, "Traceparent": h}},
			{"GET", "/v1/policies/" + e, "", nil},
			{"PUT", "/v1/policies/" + e, `{"queue": 5}`, nil},
			{"PUT", "/v1/policies/p", `{"outflow": "` + strings.ReplaceAll(h, `"`, "") + `"}`, nil},
			{"DELETE", "/v1/policies/" + e + "/override", "", nil},
			{"GET", "/v1/dead?policy=" + q, "", nil},
			{"GET", "/v1/dead?policy=p&key=" + q, "", nil},
			{"GET", "/v1/dead?policy=p&reason=" + q, "", nil},
			{"GET", "/v1/dead?limit=" + q, "", nil},
			{"GET", "/v1/dead/" + e + "/1", "", nil},
			{"GET", "/v1/dead/p/" + e, "", nil},
			{"POST", "/v1/dead/replay?policy=p&key=" + q, "", nil},
			{"DELETE", "/v1/dead?policy=" + q, "", nil},
		} {
			code, body := do(c.method, c.path, c.body, c.hdr)
			if code >= 500 {
				t.Errorf("%s %.80q = %d %.200s, want a 4xx (or a success)", c.method, c.path, code, body)
			}
		}
		// And by NATS: hostile Shaper-Key and Idempotency-Key headers.
		m, err := r.nc.RequestMsg(&nats.Msg{Subject: "shaper.submit.p.k", Data: []byte("x"),
			Header: nats.Header{"Shaper-Key": []string{h}, "Idempotency-Key": []string{h}}}, 5*time.Second)
		if err != nil {
			t.Errorf("NATS submit with Shaper-Key %.40q: %v", h, err)
		} else if strings.Contains(string(m.Data), `"code":5`) {
			t.Errorf("NATS submit with Shaper-Key %.40q = %s, want a 4xx", h, m.Data)
		}
	}
	// A Shaper-Key header of two values, or of an empty one, is refused:
	// only the first was checked, and an empty one read as none.
	for _, vs := range [][]string{{"k", "victim"}, {""}} {
		m, err := r.nc.RequestMsg(&nats.Msg{Subject: "shaper.submit.p.k", Data: []byte("x"), Header: nats.Header{"Shaper-Key": vs}}, 5*time.Second)
		if err != nil || !strings.Contains(string(m.Data), `"code":400`) || !strings.Contains(string(m.Data), "holds one value") {
			t.Errorf("NATS submit with Shaper-Key %q = %v, %v; want 400", vs, m, err)
		}
	}
	// A dotted key sent as subject tokens is refused with the subject its
	// key has.
	m, err := r.nc.Request("shaper.submit.p.a.b", []byte("x"), 5*time.Second)
	if want := `key \"a.b\" is shaper.submit.p.~YS5i`; err != nil || !strings.Contains(string(m.Data), want) {
		t.Errorf("NATS submit to shaper.submit.p.a.b = %v, %v; want a 400 saying %s", m, err, want)
	}
	// Still healthy: ready, admits, delivers.
	after := collect(t, r.nc, "shaper.out.p.after")
	if code, body := do("GET", "/readyz", "", nil); code != http.StatusOK {
		t.Fatalf("/readyz after the hostile input = %d %s", code, body)
	}
	if a := r.post(t, "p", "after", []byte("still here")); a.code != http.StatusAccepted {
		t.Fatalf("POST after the hostile input = %d %v", a.code, a.body)
	}
	after(1, 10*time.Second)
}

// A path with a ".", ".." or empty segment under /v1/ is refused, not
// redirected to its cleaned form: a key's unescaped "x/../../q/y" was
// answered 307 to /v1/jobs/q/y, which Go's HTTP client follows with the
// body, queuing the job under another policy. Escaped, the same key is
// the key it says.
func TestUncleanPathsRefused(t *testing.T) {
	r := start(t, `
policies:
  - name: p
    outflow: 100/s
    queue: 5
  - name: q
    outflow: 100/s
    queue: 5
`)
	// Nor anywhere else: a tour's "//v1/…" was redirected to "/v1/jobs/q/y";
	// and a trailing "/" is an empty last segment, not part of the key.
	for _, p := range []string{"/v1/jobs/p/x/../../q/y", "/v1/jobs/p//x", "/v1/jobs/p/./x", "/v1/jobs/p/.", "/v1/jobs/p/x/..",
		"//v1/jobs/p/x/../../q/y", "/x/../v1/jobs/q/y", "/./v1/jobs/q/y", "/v1/jobs/p/x/"} {
		resp, err := http.Post(r.base+p, "application/octet-stream", strings.NewReader("moved"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(string(b), `escape a key's \"/\" as %2F`) || resp.Request.URL.Path != p {
			t.Errorf("POST %s = %d (%s, at %s) %s, want 400 saying to escape, not followed", p, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Request.URL.Path, b)
		}
	}
	if a := r.post(t, "p", "x/../../q/y", []byte("kept")); a.code != http.StatusAccepted || a.body["key"] != "x/../../q/y" || a.body["policy"] != "p" {
		t.Errorf("the same key escaped = %d %v, want 202 for policy p, that key", a.code, a.body)
	}
	if a := r.post(t, "p", ".hidden", nil); a.code != http.StatusAccepted {
		t.Errorf("key .hidden = %d %v, want 202", a.code, a.body)
	}
	for _, st := range r.Status() {
		if want := map[string]uint64{"p": 2, "q": 0}[st.Name]; st.Admitted != want {
			t.Errorf("policy %s admitted %d, want %d", st.Name, st.Admitted, want)
		}
	}
	// A 404 under /v1/jobs/ says the job routes.
	resp, err := http.Post(r.base+"/v1/jobs/", "application/octet-stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "submit with POST /v1/jobs/{policy}/{key}") {
		t.Errorf("POST /v1/jobs/ = %d %s, want 404 naming the job routes", resp.StatusCode, b)
	}
	// Without a key, the policy is judged first: an unknown one is 404
	// naming the known ones, a known one 400 for the missing key.
	for path, want := range map[string]struct {
		code int
		says string
	}{"/v1/jobs/nope": {404, `unknown policy \"nope\"`}, "/v1/jobs/p": {400, "bad key: empty"}} {
		resp, err := http.Post(r.base+path, "application/octet-stream", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.code || !strings.Contains(string(b), want.says) {
			t.Errorf("POST %s = %d %s, want %d saying %s", path, resp.StatusCode, b, want.code, want.says)
		}
	}
}
