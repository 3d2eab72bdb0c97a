package shaper_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
)

// running is a Shaper serving in the background of a test, with a client
// connection to its embedded JetStream when it has one.
type running struct {
	*testenv.Running
	base string // http://host:port
	nc   *nats.Conn
}

// startFile starts a Shaper serving the policy file yaml, which write
// replaces (for a reload).
func startFile(t testing.TB, yaml string) (r *running, write func(yaml string)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policies.yaml")
	write = func(yaml string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(yaml)
	set, err := policies.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return wrap(t, testenv.Shaper(t, shaper.Config{Policies: set, PolicyFile: file})), write
}

func start(t testing.TB, yaml string, edit ...func(*shaper.Config)) *running {
	t.Helper()
	cfg := shaper.Config{Policies: testenv.Policies(t, yaml)}
	for _, e := range edit {
		e(&cfg)
	}
	return wrap(t, testenv.Shaper(t, cfg))
}

func wrap(t testing.TB, s *testenv.Running) *running {
	t.Helper()
	r := &running{Running: s, base: "http://" + s.HTTPAddr()}
	if s.NATSURL() != "" {
		var err error
		if r.nc, err = nats.Connect(s.NATSURL()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.nc.Close)
	}
	return r
}

type answer struct {
	code   int
	header http.Header
	body   map[string]any
}

func (r *running) post(t *testing.T, policy, key string, payload []byte, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest("POST", r.base+"/v1/jobs/"+url.PathEscape(policy)+"/"+url.PathEscape(key), bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(b, &a.body); err != nil {
		t.Fatalf("POST %s/%s: %d with body %q: %v", policy, key, resp.StatusCode, b, err)
	}
	return a
}

// acceptAll posts n jobs to key of policy, with payloads "0", "1", …, and
// returns their ids; each must be accepted.
func (r *running) acceptAll(t *testing.T, policy, key string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		a := r.post(t, policy, key, []byte(fmt.Sprint(i)))
		if a.code != http.StatusAccepted {
			t.Fatalf("POST #%d to %s/%s = %d %v", i, policy, key, a.code, a.body)
		}
		ids[i] = a.body["id"].(string)
	}
	return ids
}

// collect subscribes to subject and returns the messages received so far on each call.
func collect(t *testing.T, nc *nats.Conn, subject string) func(n int, timeout time.Duration) []*nats.Msg {
	t.Helper()
	var (
		mu  sync.Mutex
		got []*nats.Msg
		at  []time.Time
	)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		mu.Lock()
		got = append(got, m)
		at = append(at, time.Now())
		mu.Unlock()
		if m.Reply != "" {
			m.Respond(nil) // a confirmed delivery: taken
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	t.Cleanup(func() { sub.Unsubscribe() })
	return func(n int, timeout time.Duration) []*nats.Msg {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			mu.Lock()
			if len(got) >= n {
				out := append([]*nats.Msg(nil), got...)
				for i := range out {
					out[i].Header.Set("X-Test-Received", at[i].Format(time.RFC3339Nano))
				}
				mu.Unlock()
				return out
			}
			have := len(got)
			mu.Unlock()
			if time.Now().After(deadline) {
				t.Fatalf("%d messages on %s after %v, want %d", have, subject, timeout, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func received(m *nats.Msg) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, m.Header.Get("X-Test-Received"))
	return t
}
