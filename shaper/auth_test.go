package shaper_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
)

// adminRoutes are every route that changes a policy or touches dead
// letters, with a body that would succeed.
var adminRoutes = []struct{ method, path, body string }{
	{"PUT", "/v1/policies/p", `{"outflow": "7/s"}`},
	{"DELETE", "/v1/policies/p/override", ""},
	{"POST", "/v1/reload", ""},
	{"GET", "/v1/dead", ""},
	{"GET", "/v1/dead/p/1", ""},
	{"POST", "/v1/dead/replay?policy=p", ""},
	{"DELETE", "/v1/dead?policy=p", ""},
}

// serveAs runs one request through h as if it came from remote.
func serveAs(h http.Handler, remote, method, path, body, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = remote
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func authShaper(t *testing.T, edit func(*shaper.Config)) *testenv.Running {
	t.Helper()
	file := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(file, []byte("policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n"), 0o644)
	set, err := policies.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg := shaper.Config{Policies: set, PolicyFile: file}
	if edit != nil {
		edit(&cfg)
	}
	return testenv.Shaper(t, cfg)
}

// The requests come through the shaper's real handler, with the remote
// address a proxy-less client far away would have: no traffic leaves
// 127.0.0.0/8.
func TestAdminRoutesWithoutToken(t *testing.T) {
	s := authShaper(t, nil)
	h := s.Handler()
	for _, rt := range adminRoutes {
		if w := serveAs(h, "203.0.113.9:4000", rt.method, rt.path, rt.body, ""); w.Code != http.StatusForbidden {
			t.Errorf("%s %s from afar without a token configured = %d, want 403", rt.method, rt.path, w.Code)
		}
		if w := serveAs(h, "127.0.0.1:4000", rt.method, rt.path, rt.body, ""); w.Code == http.StatusForbidden || w.Code == http.StatusUnauthorized {
			t.Errorf("%s %s from loopback without a token configured = %d, want it let through", rt.method, rt.path, w.Code)
		}
	}
	if st := s.Status()[0]; st.Outflow.String() != "5/s" || st.Override {
		t.Errorf("after the refused PUT and the loopback DELETE: %s override %v, want 5/s from the file", st.Outflow, st.Override)
	}
	// Submission and status stay open.
	if w := serveAs(h, "203.0.113.9:4000", "POST", "/v1/jobs/p/k", "x", ""); w.Code != http.StatusAccepted {
		t.Errorf("POST /v1/jobs from afar = %d, want 202", w.Code)
	}
	if w := serveAs(h, "203.0.113.9:4000", "GET", "/v1/policies", "", ""); w.Code != http.StatusOK {
		t.Errorf("GET /v1/policies from afar = %d, want 200", w.Code)
	}
}

func TestAdminRoutesWithToken(t *testing.T) {
	s := authShaper(t, func(c *shaper.Config) { c.AdminToken = "s3cret" })
	h := s.Handler()
	for _, remote := range []string{"203.0.113.9:4000", "127.0.0.1:4000"} {
		for _, rt := range adminRoutes {
			if w := serveAs(h, remote, rt.method, rt.path, rt.body, ""); w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s from %s without a token = %d, want 401 with WWW-Authenticate", rt.method, rt.path, remote, w.Code)
			}
			if w := serveAs(h, remote, rt.method, rt.path, rt.body, "guess"); w.Code != http.StatusForbidden {
				t.Errorf("%s %s from %s with a wrong token = %d, want 403", rt.method, rt.path, remote, w.Code)
			}
		}
	}
	if st := s.Status()[0]; st.Outflow.String() != "5/s" {
		t.Fatalf("after refused PUTs: outflow %s, want 5/s", st.Outflow)
	}
	for _, rt := range adminRoutes {
		w := serveAs(h, "203.0.113.9:4000", rt.method, rt.path, rt.body, "s3cret")
		want := http.StatusOK
		if rt.path == "/v1/dead/p/1" {
			want = http.StatusNotFound // there is no dead letter 1: the route was reached
		}
		if w.Code != want {
			t.Errorf("%s %s with the token = %d %s, want %d", rt.method, rt.path, w.Code, w.Body, want)
		}
		if rt.method == "PUT" {
			if st := s.Status()[0]; st.Outflow.String() != "7/s" {
				t.Errorf("after PUT with the token: outflow %s, want 7/s", st.Outflow)
			}
		}
	}
}

func TestSubmitToken(t *testing.T) {
	s := authShaper(t, func(c *shaper.Config) { c.SubmitToken, c.AdminToken = "sub", "adm" })
	h := s.Handler()
	if w := serveAs(h, "127.0.0.1:1", "POST", "/v1/jobs/p/k", "x", ""); w.Code != http.StatusUnauthorized {
		t.Errorf("POST without the submit token = %d, want 401", w.Code)
	}
	w := serveAs(h, "127.0.0.1:1", "POST", "/v1/jobs/p/k", "x", "sub")
	if w.Code != http.StatusAccepted {
		t.Errorf("POST with the submit token = %d %s, want 202", w.Code, w.Body)
	}
	var a struct{ ID string }
	json.Unmarshal(w.Body.Bytes(), &a)
	// Job status takes either token: an operator looks jobs up with the
	// admin one (a tour's got 403 "wrong bearer token for submission").
	for token, want := range map[string]int{"sub": 200, "adm": 200, "": 401, "other": 403} {
		w := serveAs(h, "127.0.0.1:1", "GET", "/v1/jobs/"+a.ID, "", token)
		if w.Code != want || want == 401 && !strings.Contains(w.Body.String(), "job status needs a bearer token") {
			t.Errorf("GET /v1/jobs/%s with token %q = %d %s, want %d", a.ID, token, w.Code, w.Body, want)
		}
	}
	if w := serveAs(h, "127.0.0.1:1", "POST", "/v1/jobs/p/k", "x", "adm"); w.Code != http.StatusForbidden {
		t.Errorf("POST with the admin token = %d, want 403: submitting takes the submit token", w.Code)
	}
}

func TestBeyondLoopbackNeedsATokenOrConsent(t *testing.T) {
	set := testenv.Policies(t, "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n")
	var ce *shaper.ConfigError
	if _, err := shaper.New(shaper.Config{Policies: set, HTTPAddr: ":8080"}); !errors.As(err, &ce) || ce.Field != "AdminToken" {
		t.Errorf("New with HTTP on every interface and no admin token = %v, want an AdminToken error", err)
	}
	for _, cfg := range []shaper.Config{
		{Policies: set, HTTPAddr: ":8080", AdminToken: "t"},
		{Policies: set, HTTPAddr: "0.0.0.0:8080", AdminLoopbackOnly: true},
		{Policies: set, HTTPAddr: "localhost:8080"},
	} {
		if _, err := shaper.New(cfg); err != nil {
			t.Errorf("New(HTTP %s, token %q, loopback only %v) = %v", cfg.HTTPAddr, cfg.AdminToken, cfg.AdminLoopbackOnly, err)
		}
	}
	// A setting New refuses: nothing has started yet.
	if _, err := shaper.New(shaper.Config{Policies: set, HTTPAddr: "127.0.0.1:0", NATSListen: "0.0.0.0:-1", DataDir: t.TempDir()}); !errors.As(err, &ce) || ce.Field != "NATSToken" {
		t.Errorf("New with the embedded NATS beyond loopback and no token = %v, want a NATSToken error", err)
	}
}

func TestEmbeddedNATSToken(t *testing.T) {
	s := authShaper(t, func(c *shaper.Config) { c.NATSToken = "natstok" })
	if nc, err := nats.Connect(s.NATSURL()); err == nil {
		nc.Close()
		t.Errorf("connect to the embedded server without its token succeeded")
	}
	nc, err := nats.Connect(s.NATSURL(), nats.Token("natstok"))
	if err != nil {
		t.Fatalf("connect with the token: %v", err)
	}
	defer nc.Close()
	if w := serveAs(s.Handler(), "127.0.0.1:1", "POST", "/v1/jobs/p/k", "x", ""); w.Code != http.StatusAccepted {
		t.Errorf("POST to a shaper whose embedded NATS needs a token = %d %s, want 202", w.Code, w.Body)
	}
}
