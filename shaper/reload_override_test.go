package shaper_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A live override is a patch over the file: a reload applies the file's
// changes to the fields the override leaves out, and warns of each change
// to a field it sets.
func TestReloadUnderOverride(t *testing.T) {
	r, write := startFile(t, "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n    retry: {attempts: 5, backoff: 2s}\n")
	ctx := context.Background()
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "SHAPER_POLICIES")
	if err != nil {
		t.Fatal(err)
	}
	// An override stored for a policy this shaper does not serve yet
	// applies once a reload adds it. The watch hears of the overrides in
	// order: once p's shows, q's was heard.
	if _, err := kv.Put(ctx, "q", []byte(`{"queue": 9}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "p", []byte(`{"outflow": "7/s", "retry": {"backoff": "3s"}}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the override of p applied", 5*time.Second, func() bool { return r.Status()[0].Outflow.String() == "7/s" })

	write("policies:\n  - name: p\n    outflow: 6/s\n    queue: 4\n    total: 100/s\n    retry: {attempts: 6, backoff: 4s}\n  - name: q\n    outflow: 1/s\n    queue: 1\n")
	rep, err := r.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantChanged := "p: queue 3 → 4, total none → 100/s, retry.attempts 5 → 6"
	wantWarning := "p: outflow 5/s → 6/s, retry.backoff 2s → 4s: not applied, the live override sets them (shaper policies reset p, or DELETE /v1/policies/p/override, to use the file)"
	if strings.Join(rep.Changed, "; ") != wantChanged || strings.Join(rep.Warnings, "; ") != wantWarning || strings.Join(rep.Added, " ") != "q" {
		t.Errorf("Reload report:\n changed %q\nwarnings %q\n   added %q\nwant\n changed %q\nwarnings %q\n   added q", rep.Changed, rep.Warnings, rep.Added, wantChanged, wantWarning)
	}
	st := r.Status()
	p, q := st[0], st[1]
	if p.Outflow.String() != "7/s" || p.Queue != 4 || p.Total.String() != "100/s" || p.Retry.Attempts != 6 || p.Retry.Backoff != 3*time.Second ||
		strings.Join(p.Overridden, " ") != "outflow retry.backoff" {
		t.Errorf("p after the reload: %+v, overridden %v; want the override's outflow and backoff, the file's other fields", p.Policy, p.Overridden)
	}
	if q.Queue != 9 || !q.Override {
		t.Errorf("q after the reload: queue %d, override %v; want the stored override's 9", q.Queue, q.Override)
	}

	// The same file again: nothing changes, and what the override still
	// keeps from the file is said again.
	rep, err = r.Reload(ctx)
	wantWarning = "p: the live override still sets outflow 7/s (the file says 6/s), retry.backoff 3s (the file says 4s) (shaper policies reset p, or DELETE /v1/policies/p/override, to use the file); " +
		"q: the live override still sets queue 9 (the file says 1) (shaper policies reset q, or DELETE /v1/policies/q/override, to use the file)"
	if err != nil || len(rep.Changed) != 0 || strings.Join(rep.Warnings, "; ") != wantWarning {
		t.Errorf("Reload of the same file: %v, changed %q, warnings %q; want nothing changed and the warning %q", err, rep.Changed, rep.Warnings, wantWarning)
	}

	// Back to the file: the file's values of today.
	code, body := r.do(t, http.MethodDelete, "/v1/policies/p/override", "")
	if code != 200 || body["outflow"] != "6/s" || body["retry"].(map[string]any)["backoff"] != "4s" || body["override"] != false {
		t.Errorf("DELETE override = %d %v, want the reloaded file's policy", code, body)
	}
}

// An override keeps each field it sets until it is reset, even at the
// file's value: outflow set away and back, and adapt turned off and on
// again, stay overridden, and a reload does not change them. adapt "on"
// sets only that adaptation is on: a reload applies the file's floor, and
// does not warn that it is held. Any adapt field keeps adaptation on
// when the file drops its block, and the reload warns of that.
func TestReloadUnderAdaptOverride(t *testing.T) {
	r, write := startFile(t, "policies:\n  - name: p\n    outflow: 50/s\n    queue: 3\n    adapt: {floor: 5/s}\n  - name: q\n    outflow: 10/s\n    queue: 3\n    adapt: {floor: 2/s}\n")
	for _, change := range []struct{ policy, body string }{
		{"p", `{"adapt": "off"}`}, {"p", `{"adapt": "on"}`}, {"p", `{"outflow": "40/s"}`}, {"p", `{"outflow": "50/s"}`},
		{"q", `{"adapt": {"tolerance": 2}}`},
	} {
		if code, body := r.do(t, http.MethodPut, "/v1/policies/"+change.policy, change.body); code != 200 {
			t.Fatalf("PUT %s %s = %d %v", change.policy, change.body, code, body)
		}
	}
	st := r.Status()
	if p := st[0]; strings.Join(p.Overridden, " ") != "outflow adapt" || p.Adapt == nil || p.Adapt.Floor.String() != "5/s" {
		t.Errorf("p after outflow and adapt went back to the file's: overridden %v, adapt %+v; want outflow and adapt overridden, the file's block", p.Overridden, p.Adapt)
	}

	write("policies:\n  - name: p\n    outflow: 60/s\n    queue: 3\n    adapt: {floor: 4/s}\n  - name: q\n    outflow: 10/s\n    queue: 3\n")
	rep, err := r.Reload(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantChanged := "p: adapt.floor 5/s → 4/s; q: adapt.floor 2/s → default"
	wantWarnings := "p: outflow 50/s → 60/s: not applied, the live override sets it (shaper policies reset p, or DELETE /v1/policies/p/override, to use the file); " +
		"q: adapt per key (floor 2/s, latency target 1.5 × learned baseline) → off: not applied, the live override sets it (shaper policies reset q, or DELETE /v1/policies/q/override, to use the file)"
	if strings.Join(rep.Changed, "; ") != wantChanged || strings.Join(rep.Warnings, "; ") != wantWarnings {
		t.Errorf("Reload report:\n changed %q\nwarnings %q\nwant\n changed %q\nwarnings %q", rep.Changed, rep.Warnings, wantChanged, wantWarnings)
	}
	st = r.Status()
	if p := st[0]; p.Outflow.String() != "50/s" || p.Adapt == nil || p.Adapt.Floor.String() != "4/s" {
		t.Errorf("p after the reload: outflow %s, adapt %+v; want the override's 50/s, the file's floor 4/s", p.Outflow, p.Adapt)
	}
	if q := st[1]; q.Adapt == nil || q.Adapt.Tolerance != 2 {
		t.Errorf("q after the reload: adapt %+v; want on, with the override's tolerance 2", q.Adapt)
	}
}
