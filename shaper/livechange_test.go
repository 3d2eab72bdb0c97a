package shaper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
)

// everyField is a policy whose every field has a value other than its
// default.
const everyField = `
policies:
  - name: all
    outflow: 7/s
    queue: 40
    overflow: defer
    total: 300/s
    deliver: {subject: out.all, timeout: 3s}
    retry: {attempts: 5, backoff: 7s, max_backoff: 2m, deadline: 2h, budget: off}
    admit: {algorithm: token_bucket, limit: 600/m, burst: 10, shadow: true, fail: closed}
    adapt: {per: key, floor: 5/s, latency: 250ms, tolerance: 2}
    concurrency: {key: 3, total: 30}
`

// fields returns the policy fields of a GET /v1/policies/{name} answer by
// their path ("retry.backoff"), as JSON text; a field left out is "".
func fields(body map[string]any) map[string]string {
	out := map[string]string{}
	text := func(v any) string {
		if v == nil {
			return ""
		}
		b, _ := json.Marshal(v)
		return strings.Trim(string(b), `"`)
	}
	for _, f := range []string{"outflow", "queue", "overflow", "total"} {
		out[f] = text(body[f])
	}
	for block, names := range map[string][]string{
		"deliver":     {"subject", "stream", "mode", "webhook", "timeout"},
		"retry":       {"attempts", "backoff", "max_backoff", "deadline", "budget"},
		"admit":       {"algorithm", "limit", "burst", "shadow", "fail"},
		"adapt":       {"per", "floor", "latency", "tolerance"},
		"concurrency": {"key", "total"},
	} {
		m, _ := body[block].(map[string]any)
		for _, f := range names {
			out[block+"."+f] = text(m[f])
		}
	}
	return out
}

// moved lists the fields in which b differs from a, sorted.
func moved(a, b map[string]string) []string {
	var out []string
	for f := range a {
		if a[f] != b[f] {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

func overridden(body map[string]any) string {
	list, _ := body["overridden"].([]any)
	var out []string
	for _, f := range list {
		out = append(out, f.(string))
	}
	return strings.Join(out, " ")
}

// Changing one field live changes exactly that field; null takes it back
// to the file's value.
func TestLiveChangeEveryField(t *testing.T) {
	r := start(t, everyField)
	const path = "/v1/policies/all"
	code, body := r.do(t, http.MethodGet, path, "")
	if code != http.StatusOK {
		t.Fatalf("GET = %d %v", code, body)
	}
	file := fields(body)
	if file["retry.budget"] != "off" || file["admit.shadow"] != "true" || file["deliver.timeout"] != "3s" {
		t.Fatalf("the file's policy reads %v", file)
	}
	set := func(path, value string) string { // a body setting path to value (JSON)
		block, leaf, nested := strings.Cut(path, ".")
		if nested {
			return fmt.Sprintf(`{%q: {%q: %s}}`, block, leaf, value)
		}
		return fmt.Sprintf(`{%q: %s}`, block, value)
	}
	for _, c := range []struct {
		field, value, shown string // shown: as GET shows the new value
	}{
		{"outflow", `"9/s"`, "9/s"},
		{"queue", `50`, "50"},
		{"overflow", `"reject"`, "reject"},
		{"total", `"100/s"`, "100/s"},
		{"total", `""`, ""}, // no cap
		{"total", `"off"`, ""},
		{"retry.attempts", `3`, "3"},
		{"retry.backoff", `"5s"`, "5s"},
		{"retry.max_backoff", `"3m"`, "3m0s"},
		{"retry.deadline", `"1h"`, "1h0m0s"},
		{"retry.budget", `"50%"`, "50%"},
		{"admit.algorithm", `"gcra"`, "gcra"},
		{"admit.limit", `"20/s"`, "20/s"},
		{"admit.burst", `4`, "4"},
		{"admit.shadow", `false`, ""}, // GET leaves a false shadow out
		{"admit.fail", `"open"`, "open"},
		{"adapt.per", `"policy"`, "policy"},
		{"adapt.floor", `"3/s"`, "3/s"},
		{"adapt.latency", `"400ms"`, "400ms"},
		{"adapt.tolerance", `3`, "3"},
		{"concurrency.key", `2`, "2"},
		{"concurrency.total", `10`, "10"},
	} {
		code, body := r.put(t, path, set(c.field, c.value))
		if code != http.StatusOK {
			t.Errorf("PUT %s = %d %v", set(c.field, c.value), code, body)
			continue
		}
		_, got := r.do(t, http.MethodGet, path, "")
		now := fields(got)
		if m := moved(file, now); len(m) != 1 || m[0] != c.field || now[c.field] != c.shown {
			t.Errorf("PUT %s moved %v (%s: %q → %q), want exactly %s to %q", set(c.field, c.value), m, c.field, file[c.field], now[c.field], c.field, c.shown)
		}
		if o := overridden(got); o != c.field || got["override"] != true {
			t.Errorf("after PUT %s: override %v, overridden %q; want %s", set(c.field, c.value), got["override"], o, c.field)
		}
		code, body = r.put(t, path, set(c.field, "null"))
		if code != http.StatusOK {
			t.Errorf("PUT %s = %d %v", set(c.field, "null"), code, body)
			continue
		}
		if m := moved(file, fields(body)); len(m) != 0 || body["override"] != false || overridden(body) != "" {
			t.Errorf("PUT %s left %v moved (override %v, overridden %q), want the file's policy", set(c.field, "null"), m, body["override"], overridden(body))
		}
	}

	// The blocks as a whole: admit off removes the limit, null brings the
	// file's back; a block reset drops every field of it the override set.
	if code, body := r.put(t, path, `{"admit": "off"}`); code != 200 || body["admit"] != nil || overridden(body) != "admit" {
		t.Errorf(`PUT {"admit": "off"} = %d, admit %v, overridden %q; want no admit`, code, body["admit"], overridden(body))
	}
	if m := moved(file, fields(r.get(t, path))); len(m) != 5 || !strings.HasPrefix(m[0], "admit.") {
		t.Errorf(`after admit off, moved %v, want the admit fields only`, m)
	}
	if code, body := r.put(t, path, `{"adapt": "off"}`); code != 200 || body["adapt"] != nil || overridden(body) != "admit adapt" {
		t.Errorf(`PUT {"adapt": "off"} = %d, adapt %v, overridden %q; want no adapt`, code, body["adapt"], overridden(body))
	}
	if code, body := r.put(t, path, `{"adapt": null, "admit": null, "retry": {"attempts": 2, "deadline": "3h"}}`); code != 200 || overridden(body) != "retry.attempts retry.deadline" {
		t.Errorf("PUT admit null and two retry fields = %d, overridden %q", code, overridden(body))
	}
	if code, body := r.put(t, path, `{"retry": null}`); code != 200 || len(moved(file, fields(body))) != 0 || body["override"] != false {
		t.Errorf(`PUT {"retry": null} = %d, moved %v, override %v; want the file's policy`, code, moved(file, fields(body)), body["override"])
	}

	// Where jobs are delivered cannot change while running; giving its
	// current value changes nothing.
	for _, d := range []string{`{"subject": "out.other"}`, `{"stream": "S"}`, `{"mode": "publish"}`, `{"webhook": "http://127.0.0.1:1/"}`,
		`{"timeout": "4s"}`, `{"subject": "out.*"}`, `"elsewhere"`} {
		body := `{"deliver": ` + d + `, "queue": 9}`
		code, got := r.put(t, path, body)
		if code != http.StatusBadRequest || got["detail"] != `policy "all": deliver cannot change while running: edit the policy file and restart` {
			t.Errorf("PUT %s = %d %v, want 400: deliver cannot change", body, code, got)
		}
	}
	for _, same := range []string{`{"deliver": {"timeout": "3s", "subject": "out.all"}}`, `{"deliver": "out.all"}`, `{"deliver": null}`} {
		if code, got := r.put(t, path, same); code != 200 || len(moved(file, fields(got))) != 0 || got["override"] != false {
			t.Errorf("PUT %s (deliver as it is) = %d %v, want nothing changed", same, code, got)
		}
	}
	// So does the number of partitions; a value no policy file takes is
	// refused as such, not taken as no change.
	for _, tc := range []struct{ body, detail string }{
		{`{"partitions": 4, "queue": 9}`, `policy "all": partitions cannot change while running: edit the policy file and restart the shapers`},
		{`{"partitions": 0}`, `policy "all": partitions: `},
		{`{"partitions": -1}`, `policy "all": partitions: `},
		{`{"partitions": 100000}`, `policy "all": partitions: `},
	} {
		code, got := r.put(t, path, tc.body)
		if detail, _ := got["detail"].(string); code != http.StatusBadRequest || !strings.HasPrefix(detail, tc.detail) {
			t.Errorf("PUT %s = %d %v, want 400 saying %q", tc.body, code, got, tc.detail)
		}
	}
	if code, got := r.put(t, path, `{"partitions": 1}`); code != 200 || got["override"] != false {
		t.Errorf(`PUT {"partitions": 1} (as it is) = %d %v, want nothing changed`, code, got)
	}
	if m := moved(file, fields(r.get(t, path))); len(m) != 0 {
		t.Errorf("refused changes moved %v", m)
	}
}

func (r *running) get(t *testing.T, path string) map[string]any {
	t.Helper()
	code, body := r.do(t, http.MethodGet, path, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %v", path, code, body)
	}
	return body
}

// The example: a file with retry {attempts: 5, backoff: 7s,
// deadline: 2h, budget: off}, changed live with {"retry": {"attempts": 3}},
// keeps its backoff, deadline and budget.
func TestLiveChangeKeepsTheBlock(t *testing.T) {
	r := start(t, "policies:\n  - name: orders\n    outflow: 20/s\n    queue: 100\n    retry: {attempts: 5, backoff: 7s, deadline: 2h, budget: off}\n")
	code, body := r.put(t, "/v1/policies/orders", `{"retry": {"attempts": 3}}`)
	retry, _ := body["retry"].(map[string]any)
	if code != 200 || fmt.Sprint(retry) != "map[attempts:3 backoff:7s budget:off deadline:2h0m0s max_backoff:1m0s]" {
		t.Errorf(`PUT {"retry": {"attempts": 3}} = %d, retry %v; want attempts 3 and the file's backoff 7s, deadline 2h, budget off`, code, retry)
	}
	if st := r.Status()[0]; st.Retry.Budget != policies.BudgetOff || st.Retry.Backoff != 7*time.Second {
		t.Errorf("the live policy's retry is %+v", st.Retry)
	}
}

// Bad input of every kind is answered 400 naming the field, and changes
// nothing; an oversized body is 413.
func TestLiveChangeRefused(t *testing.T) {
	r := start(t, everyField)
	const path = "/v1/policies/all"
	before := fields(r.get(t, path))
	for _, c := range []struct{ body, detail string }{
		{`{"retry": {"backoff": "7x"}}`, `policy "all": retry.backoff: "7x": want a duration such as 500ms, 90s, 5m or 24h`},
		{`{"retry": {"backoff": "5m"}}`, `policy "all": retry.backoff: 5m0s is more than max_backoff 2m0s`},
		{`{"retry": {"attempts": "3"}}`, `policy "all": retry.attempts: "3": want a whole number`},
		{`{"retry": {"budget": 0}}`, `policy "all": retry.budget: "0": want a share above 0% and at most 100%, such as 20% or 0.2, or off`},
		{`{"retry": 3}`, `policy "all": retry: "3": want a mapping of attempts, backoff, max_backoff, deadline, budget`},
		{`{"retry": {"tries": 3}}`, `policy "all": retry: unknown field "tries"`},
		{`{"admit": {"algorithm": "fixed_window"}}`, `policy "all": admit.burst: fixed_window takes no burst: only gcra and token_bucket do`},
		{`{"admit": "on"}`, `policy "all": admit: "on": want off or a mapping of algorithm, limit, burst, shadow, fail`},
		{`{"queue": 0, "outflow": "fast"}`, `policy "all": outflow: rate "fast": want N/s, N/m, N/h, N/d or N/<duration>`},
		{`{"total": 5}`, `policy "all": total: rate "5": want N/s, N/m, N/h, N/d or N/<duration>`},
		{`{"name": "other"}`, `policy "all": name cannot change`},
		{`{"name": null}`, `policy "all": name cannot change`},
		{`[]`, `policy "all": a list: want a JSON object of the fields to change`},
		{`{"queue": 1,}`, `policy "all": not JSON: invalid character '}' looking for beginning of object key string`},
	} {
		code, body := r.put(t, path, c.body)
		if code != http.StatusBadRequest || !strings.HasPrefix(fmt.Sprint(body["detail"]), c.detail) {
			t.Errorf("PUT %s = %d %v, want 400 %q", c.body, code, body["detail"], c.detail)
		}
	}
	if code, _ := r.put(t, path, `{"overflow": "`+strings.Repeat("x", 70<<10)+`"}`); code != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT of 70 KiB = %d, want 413", code)
	}
	after := r.get(t, path)
	if m := moved(before, fields(after)); len(m) != 0 || after["override"] != false {
		t.Errorf("refused changes moved %v (override %v)", m, after["override"])
	}
}

// Changes made at once through two shapers are both kept: each merges
// into the override as stored, not as it last heard of it.
func TestLiveChangesMerge(t *testing.T) {
	ns := testenv.NATS(t)
	set := testenv.Policies(t, tunePolicy)
	a := wrap(t, testenv.Shaper(t, shaper.Config{Policies: set, NATSURL: ns.ClientURL(), InstanceID: "a"}))
	b := wrap(t, testenv.Shaper(t, shaper.Config{Policies: set, NATSURL: ns.ClientURL(), InstanceID: "b"}))
	for i := range 5 {
		if code, _ := a.put(t, "/v1/policies/t", fmt.Sprintf(`{"outflow": "%d/s"}`, 10+i)); code != 200 {
			t.Fatalf("PUT outflow through a = %d", code)
		}
		if code, _ := b.put(t, "/v1/policies/t", fmt.Sprintf(`{"queue": %d}`, 10+i)); code != 200 {
			t.Fatalf("PUT queue through b = %d", code)
		}
	}
	for _, r := range []*running{a, b} {
		waitFor(t, "both changes on both shapers", 5*time.Second, func() bool {
			st := r.Status()[0]
			return st.Outflow.String() == "14/s" && st.Queue == 14
		})
	}
}

// An override stored by an earlier release, a whole policy, still
// applies; a change merges into it.
func TestLiveChangeOverOldOverride(t *testing.T) {
	r := start(t, everyField)
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "SHAPER_POLICIES")
	if err != nil {
		t.Fatal(err)
	}
	old := r.Status()[0].Policy
	old.Outflow, old.Admit, old.Total = policies.Rate{N: 11, Per: time.Second}, nil, policies.Rate{}
	stored, _ := json.Marshal(old)
	if _, err := kv.Put(ctx, "all", stored); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old override applied", 5*time.Second, func() bool {
		st := r.Status()[0]
		return st.Outflow.String() == "11/s" && st.Admit == nil && st.Total.IsZero() && st.Override
	})
	code, body := r.put(t, "/v1/policies/all", `{"queue": 41}`)
	if code != 200 || body["outflow"] != "11/s" || body["queue"] != 41.0 || body["admit"] != nil {
		t.Errorf("PUT queue over the old override = %d %v, want its outflow and no admit kept", code, body)
	}
	e, err := kv.Get(ctx, "all")
	if err != nil || strings.Contains(string(e.Value()), `"name"`) || !strings.Contains(string(e.Value()), `"admit":"off"`) {
		t.Errorf("stored override now %s, %v; want a patch", e.Value(), err)
	}
}
