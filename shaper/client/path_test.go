package client

import (
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/queue"
)

// hostileKeys are keys that a naive URL or subject would mangle.
var hostileKeys = []string{
	"a/b", "..", ".", "...", "%", "%2F", "%2E%2E", "a b", " lead", "trail ", "é", "ü/..", "../..", "a//b", "/",
	"a.b", "*", ">", "$SYS.x", "\x00nul", "\r\nInjected: 1", "?q=1#f", "~YS5i", "-", "\t", "+", ";x=1",
	strings.Repeat("é", 128),
}

// The paths Client builds reach a Go router's handler with every path
// value as it was, never cleaned or redirected.
func FuzzSegment(f *testing.F) {
	for _, k := range hostileKeys {
		f.Add("orders", k)
	}
	f.Add(".", "..")
	f.Add("\xff", "\xfe\x00")
	mux := http.NewServeMux()
	var gotPolicy, gotKey string
	mux.HandleFunc("POST /v1/jobs/{policy}/{key...}", func(w http.ResponseWriter, r *http.Request) {
		gotPolicy, gotKey = r.PathValue("policy"), r.PathValue("key")
	})
	f.Fuzz(func(t *testing.T, policy, key string) {
		if policy == "" || key == "" {
			t.Skip("an empty segment is refused before any request")
		}
		if policy == "/" {
			t.Skip("Go's router takes a single-segment value of \"/\" for a trailing slash; no policy has that name")
		}
		gotPolicy, gotKey = "", ""
		req, err := http.NewRequest(http.MethodPost, "http://shaper"+"/v1/jobs/"+segment(policy)+"/"+segment(key), nil)
		if err != nil {
			t.Fatalf("policy %q, key %q: %v", policy, key, err)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("POST %s = %d (Location %q), want 200", req.URL.EscapedPath(), w.Code, w.Header().Get("Location"))
		}
		if gotPolicy != policy || gotKey != key {
			t.Errorf("POST %s reached the handler as policy %q, key %q; want %q, %q", req.URL.EscapedPath(), gotPolicy, gotKey, policy, key)
		}
	})
}

// A NATS submission's subject has exactly one token for the key, which
// decodes to the key; the header carries the key only when it arrives
// unchanged.
func FuzzSubject(f *testing.F) {
	for _, k := range hostileKeys {
		f.Add(k)
	}
	n := &NATS{root: DefaultSubmitSubject + "."} // Subject uses no connection
	// What a value becomes in a NATS header: nats.go trims it and turns CR
	// and LF into spaces; the reader drops leading spaces and tabs.
	throughHeader := func(v string) string {
		sent := strings.NewReplacer("\r", " ", "\n", " ").Replace(textproto.TrimString(v))
		return strings.TrimLeft(sent, " \t")
	}
	f.Fuzz(func(t *testing.T, key string) {
		subject, err := n.Subject("orders", key)
		if queue.CheckKey(key) != nil {
			if err == nil {
				t.Fatalf("Subject(orders, %q) = %q, want an error", key, subject)
			}
			return
		}
		if err != nil {
			t.Fatalf("Subject(orders, %q): %v", key, err)
		}
		tokens := strings.Split(subject, ".")
		if len(tokens) != 4 || tokens[0] != "shaper" || tokens[1] != "submit" || tokens[2] != "orders" {
			t.Fatalf("Subject(orders, %q) = %q, want shaper.submit.orders.<one token>", key, subject)
		}
		if got, err := queue.DecodeKey(tokens[3]); err != nil || got != key {
			t.Errorf("the token %q of key %q decodes to %q, %v", tokens[3], key, got, err)
		}
		if got := throughHeader(key); headerSafe(key) != (got == key) {
			t.Errorf("headerSafe(%q) = %v, but a NATS header makes it %q", key, headerSafe(key), got)
		}
	})
}
