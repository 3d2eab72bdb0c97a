package shaper_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/shaper"
)

// pprofRoutes are net/http/pprof's routes with a short profile each, and
// what the body of each starts with or contains.
var pprofRoutes = []struct{ method, path, want string }{
	{"GET", "/debug/pprof/", "goroutine"},                  // the index, in HTML
	{"GET", "/debug/pprof/heap", "\x1f\x8b"},               // a gzipped profile.proto
	{"GET", "/debug/pprof/goroutine?debug=1", "goroutine"}, // as text
	{"GET", "/debug/pprof/allocs", "\x1f\x8b"},
	{"GET", "/debug/pprof/cmdline", "shaper.test"},
	{"GET", "/debug/pprof/profile?seconds=1", "\x1f\x8b"},
	{"GET", "/debug/pprof/symbol", "num_symbols"},
	{"POST", "/debug/pprof/symbol", "num_symbols"},
	{"GET", "/debug/pprof/trace?seconds=0.1", "go 1."}, // a runtime trace's header
}

func wantProfile(t *testing.T, what string, code int, body []byte, want string) {
	t.Helper()
	if code != http.StatusOK {
		t.Errorf("%s = %d %q, want 200", what, code, body)
		return
	}
	if strings.HasPrefix(want, "\x1f") && !bytes.HasPrefix(body, []byte(want)) || !strings.HasPrefix(want, "\x1f") && !bytes.Contains(body, []byte(want)) {
		t.Errorf("%s: body %.60q…, want a profile with %q", what, body, want)
	}
}

// /debug/pprof is an admin route: with a token configured, a request needs
// it (401 without, 403 with another), from loopback as from afar.
func TestPprofNeedsTheAdminToken(t *testing.T) {
	s := authShaper(t, func(c *shaper.Config) { c.AdminToken = "s3cret" })
	h := s.Handler()
	for _, rt := range pprofRoutes {
		for _, remote := range []string{"203.0.113.9:4000", "127.0.0.1:4000"} {
			if w := serveAs(h, remote, rt.method, rt.path, "", ""); w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s from %s without a token = %d, want 401 with WWW-Authenticate", rt.method, rt.path, remote, w.Code)
			}
			if w := serveAs(h, remote, rt.method, rt.path, "", "guess"); w.Code != http.StatusForbidden {
				t.Errorf("%s %s from %s with a wrong token = %d, want 403", rt.method, rt.path, remote, w.Code)
			}
		}
		w := serveAs(h, "203.0.113.9:4000", rt.method, rt.path, "", "s3cret")
		wantProfile(t, rt.method+" "+rt.path+" with the token", w.Code, w.Body.Bytes(), rt.want)
	}
	// Through the shaper's listener, as go tool pprof or curl fetch it.
	req, _ := http.NewRequest("GET", "http://"+s.HTTPAddr()+"/debug/pprof/heap", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantProfile(t, "GET /debug/pprof/heap over HTTP", resp.StatusCode, body, "\x1f\x8b")
	if resp, err := http.Get("http://" + s.HTTPAddr() + "/debug/pprof/heap"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /debug/pprof/heap over HTTP without the token = %d, want 401", resp.StatusCode)
	}
}

// Without a token (the default, or --admin-loopback-only on an address
// beyond loopback), /debug/pprof answers loopback clients only, like the
// other admin routes.
func TestPprofWithoutTokenIsLoopbackOnly(t *testing.T) {
	s := authShaper(t, func(c *shaper.Config) { c.AdminLoopbackOnly = true })
	h := s.Handler()
	for _, rt := range pprofRoutes {
		if strings.Contains(rt.path, "seconds=") {
			continue // the guard is the same; the profiles ran above
		}
		if w := serveAs(h, "203.0.113.9:4000", rt.method, rt.path, "", ""); w.Code != http.StatusForbidden {
			t.Errorf("%s %s from afar without a token configured = %d, want 403", rt.method, rt.path, w.Code)
		}
		w := serveAs(h, "127.0.0.1:4000", rt.method, rt.path, "", "")
		wantProfile(t, rt.method+" "+rt.path+" from loopback", w.Code, w.Body.Bytes(), rt.want)
	}
}
