package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

// shaper health exits 0 for a ready shaper, reached on loopback when
// --http names every interface (as SHAPER_HTTP does in the image), and 1
// for one that is starting or gone.
func TestHealth(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n")})
	_, port, _ := net.SplitHostPort(s.HTTPAddr())
	for _, addr := range []string{s.HTTPAddr(), "0.0.0.0:" + port, ":" + port} {
		out, _, err := runCLI(t, "health", "--http", addr)
		if err != nil || !strings.Contains(out, "127.0.0.1:"+port+": ready") {
			t.Errorf("health --http %s = %q, %v; want ready on 127.0.0.1:%s", addr, out, err, port)
		}
	}
	t.Setenv("SHAPER_HTTP", "0.0.0.0:"+port)
	if out, _, err := runCLI(t, "health", "--live"); err != nil || !strings.Contains(out, "alive") {
		t.Errorf("health --live with SHAPER_HTTP = %q, %v; want alive", out, err)
	}

	starting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"starting: connecting to NATS"}`))
	}))
	defer starting.Close()
	_, _, err := runCLI(t, "health", "--http", strings.TrimPrefix(starting.URL, "http://"))
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "not ready") || !strings.Contains(err.Error(), "connecting to NATS") {
		t.Errorf("health of a starting shaper = %v (exit %d), want exit 1 saying it is not ready and why", err, exitCode(err))
	}
	s.Stop()
	if _, _, err := runCLI(t, "health", "--http", s.HTTPAddr()); exitCode(err) != 1 {
		t.Errorf("health of a stopped shaper = %v (exit %d), want exit 1", err, exitCode(err))
	}
}

func TestLoopbackIfUnspecified(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0:8080":   "127.0.0.1:8080",
		":8080":          "127.0.0.1:8080",
		"[::]:8080":      "[::1]:8080",
		"10.0.0.5:8080":  "10.0.0.5:8080",
		"shaper1:8080":   "shaper1:8080",
		"127.0.0.1:8080": "127.0.0.1:8080",
		"nonsense":       "nonsense",
	} {
		if got := loopbackIfUnspecified(in); got != want {
			t.Errorf("loopbackIfUnspecified(%q) = %q, want %q", in, got, want)
		}
	}
}
