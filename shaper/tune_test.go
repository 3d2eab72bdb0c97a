package shaper_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

func (r *running) put(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	return r.do(t, http.MethodPut, path, body)
}

func (r *running) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	code, _, m := r.answer(t, method, path, body)
	return code, m
}

const tunePolicy = `
policies:
  - name: t
    outflow: 5/s
    queue: 3
`

func TestTuneLive(t *testing.T) {
	r := start(t, tunePolicy)
	wait := collect(t, r.nc, "shaper.out.t.>")
	// Bad input of every kind changes nothing.
	for _, bad := range []struct{ body, want string }{
		{`{"outflow": "fast"}`, "fast"},
		{`{"queue": -1}`, "queue"},
		{`{"queue": 0}`, "queue"},
		{`{"outflow": "0/s"}`, "0/s"},
		{`{"overflow": "drop"}`, "overflow"},
		{`{"color": "red"}`, "color"},
		{`{"name": "other"}`, "name"},
		{`{"deliver": {"subject": "elsewhere"}}`, "deliver"},
		{`{"admit": {"algorithm": "magic", "limit": "3/s"}}`, "magic"},
		{`not json`, "invalid"},
	} {
		code, body := r.put(t, "/v1/policies/t", bad.body)
		if code != http.StatusBadRequest || !strings.Contains(body["detail"].(string), bad.want) {
			t.Errorf("PUT %s = %d %v, want 400 naming %q", bad.body, code, body, bad.want)
		}
	}
	if code, _ := r.put(t, "/v1/policies/nope", `{"queue": 5}`); code != http.StatusNotFound {
		t.Errorf("PUT unknown policy = %d, want 404", code)
	}
	if st := r.Status()[0]; st.Outflow.String() != "5/s" || st.Queue != 3 || st.Override {
		t.Fatalf("after bad PUTs the policy is %+v, want it unchanged", st.Policy)
	}
	// A larger queue admits more at once.
	code, body := r.put(t, "/v1/policies/t", `{"queue": 6}`)
	if code != 200 || body["queue"] != 6.0 || body["override"] != true {
		t.Fatalf("PUT queue 6 = %d %v", code, body)
	}
	accepted := 0
	for range 10 {
		if r.post(t, "t", "k", []byte("x")).code == http.StatusAccepted {
			accepted++
		}
	}
	if accepted != 6 {
		t.Errorf("queue raised to 6: %d of 10 accepted, want 6", accepted)
	}
	// A faster outflow drains the backlog faster: gaps of about 20 ms, not 200.
	if code, _ := r.put(t, "/v1/policies/t", `{"outflow": "50/s"}`); code != 200 {
		t.Fatalf("PUT outflow = %d", code)
	}
	ms := wait(6, 5*time.Second)
	var gaps []time.Duration
	for i := 2; i < len(ms); i++ { // the first two may have left at the old rate
		gaps = append(gaps, received(ms[i]).Sub(received(ms[i-1])))
	}
	slices.Sort(gaps)
	if med := gaps[len(gaps)/2]; med > 100*time.Millisecond {
		t.Errorf("median gap %v after outflow 50/s (gaps %v), want about 20 ms (it was 5/s: 200 ms)", med, gaps)
	}
	// A smaller queue is enforced without purging anything.
	time.Sleep(200 * time.Millisecond)
	if code, _ := r.put(t, "/v1/policies/t", `{"queue": 2, "outflow": "1/m"}`); code != 200 {
		t.Fatalf("PUT queue 2 = %d", code)
	}
	accepted = 0
	for range 2 {
		if r.post(t, "t", "k2", []byte("x")).code == http.StatusAccepted {
			accepted++
		}
	}
	waitFor(t, "the two jobs seen queued", 5*time.Second, func() bool { return r.Status()[0].Queued >= 2 })
	for range 2 {
		if r.post(t, "t", "k2", []byte("x")).code == http.StatusAccepted {
			accepted++
		}
	}
	if accepted != 2 {
		t.Errorf("queue lowered to 2: %d of 4 accepted, want 2", accepted)
	}
	// Back to the file.
	code, body = r.do(t, http.MethodDelete, "/v1/policies/t/override", "")
	if code != 200 || body["outflow"] != "5/s" || body["queue"] != 3.0 || body["override"] != false {
		t.Errorf("DELETE override = %d %v, want the file's policy back", code, body)
	}
}

// A change made through one shaper reaches the others, and outlives a restart.
func TestTuneReachesEveryShaper(t *testing.T) {
	ns := testenv.NATS(t)
	set := testenv.Policies(t, tunePolicy)
	startOne := func(id string) *running {
		return wrap(t, testenv.Shaper(t, shaper.Config{Policies: set, NATSURL: ns.ClientURL(), InstanceID: id}))
	}
	a, b := startOne("a"), startOne("b")
	if code, _ := a.put(t, "/v1/policies/t", `{"outflow": "7/s", "queue": 9}`); code != 200 {
		t.Fatalf("PUT = %d", code)
	}
	waitFor(t, "the other shaper applies the change", 5*time.Second, func() bool {
		st := b.Status()[0]
		return st.Outflow.String() == "7/s" && st.Queue == 9 && st.Override
	})
	c := startOne("c")
	if st := c.Status()[0]; st.Outflow.String() != "7/s" || st.Queue != 9 {
		t.Errorf("a shaper started after the change runs %s / %d, want the override 7/s / 9", st.Outflow, st.Queue)
	}
}
