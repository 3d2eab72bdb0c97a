package shaper_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"
)

// The files the test checks, from the repository's root.
const (
	dashboardFile = "../deploy/grafana/shaper.json"
	alertsFile    = "../deploy/prometheus/alerts.yml"
	metricsDoc    = "../docs/metrics.md"
)

// liveExposition runs a shaper through what its dashboard shows — jobs
// admitted, refused with 429, deferred, delivered, a failed delivery and a
// dead letter, an adaptive total — and returns its /metrics once every histogram has samples.
func liveExposition(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	h := newHook(t)
	h.set(func(string) (int, string) { return http.StatusInternalServerError, "" })
	r := start(t, fmt.Sprintf(`
policies:
  - name: paced
    outflow: 1/m
    queue: 1
  - name: hooked
    outflow: 50/s
    queue: 1
    overflow: defer
    retry: {attempts: 1}
    deliver: {webhook: %q}
  - name: adaptive
    outflow: 1/m
    total: 2/m
    queue: 1
    adapt: {per: policy}
`, h.srv.URL))
	wait := collect(t, r.nc, "shaper.out.paced.>")
	codes := map[int]int{}
	for i := range 3 {
		codes[r.post(t, "paced", "k", []byte(fmt.Sprint(i))).code]++
	}
	if codes[http.StatusAccepted] == 0 || codes[http.StatusTooManyRequests] == 0 {
		t.Fatalf("answers to 3 jobs of a queue of 1 drained at 1/m: %v, want 202s and a 429", codes)
	}
	r.post(t, "hooked", "k", []byte("a"))
	r.post(t, "hooked", "k", []byte("b"))
	wait(1, 10*time.Second)
	var families map[string]*dto.MetricFamily
	waitFor(t, "a delivery, a failure and a dead letter in /metrics", 15*time.Second, func() bool {
		families = scrape(t, r.base)
		return series(families, "shaper_queue_duration_seconds", map[string]string{"policy": "paced"}).GetHistogram().GetSampleCount() > 0 &&
			series(families, "shaper_delivery_duration_seconds", map[string]string{"outcome": "failed"}) != nil &&
			series(families, "shaper_jobs_dead", map[string]string{"policy": "hooked"}).GetGauge().GetValue() > 0
	})
	return families
}

// Every query of the Grafana dashboard and every alert rule names metrics,
// labels and label values that a running shaper exports, and the metrics
// reference documents every shaper_ family of /metrics and every alert.
func TestDashboardAndAlertsMatchMetrics(t *testing.T) {
	families := liveExposition(t)
	x := exportedOf(families)
	checkAll := func(what string, exprs map[string]string) map[string]bool {
		t.Helper()
		used := map[string]bool{}
		for where, expr := range exprs {
			for _, err := range x.check(expr) {
				t.Errorf("%s, %s: %v\n\t%s", what, where, err, expr)
			}
			refs, _ := parsePromQL(expr)
			for _, s := range refs.selectors {
				used[s.metric] = true
			}
		}
		return used
	}

	used := checkAll(dashboardFile, dashboardQueries(t))
	for _, want := range []string{
		"shaper_jobs_admitted_total", "shaper_jobs_rejected_total", "shaper_jobs_deferred_total", "shaper_jobs_delivered_total",
		"shaper_jobs_queued", "shaper_queue_duration_seconds_bucket", "shaper_drain_lateness_seconds_bucket",
		"shaper_delivery_failures_total", "shaper_jobs_dead", "shaper_draining",
	} {
		if !used[want] {
			t.Errorf("%s has no panel showing %s", dashboardFile, want)
		}
	}

	rules := alertRules(t)
	exprs := map[string]string{}
	for _, r := range rules {
		exprs[r.Alert] = r.Expr
	}
	checkAll(alertsFile, exprs)

	doc, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if !strings.Contains(string(doc), r.Alert) {
			t.Errorf("%s does not list the alert %s of %s", metricsDoc, r.Alert, alertsFile)
		}
	}
	blocks := map[string]string{}
	for i, b := range codeBlocks(string(doc), "promql") {
		blocks[fmt.Sprintf("promql block %d", i+1)] = b
	}
	checkAll(metricsDoc, blocks)
	for name := range families {
		if strings.HasPrefix(name, "shaper_") && !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s does not document %s, which /metrics exports", metricsDoc, name)
		}
	}
	current, _, _ := strings.Cut(string(doc), "### Renamed metrics") // the old names are gone
	if _, after, ok := strings.Cut(string(doc), "### Renamed metrics"); ok {
		_, after, _ = strings.Cut(after, "\n#")
		current += after
	}
	for _, name := range regexp.MustCompile(`\bshaper_[a-z0-9_]*[a-z0-9]\b`).FindAllString(current, -1) {
		if families[name] == nil && x[name] == nil {
			t.Errorf("%s names %s, which /metrics does not export", metricsDoc, name)
		}
	}
}

// dashboardQueries returns the PromQL of every panel's targets and of the
// query variables, by where they are.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string                  `json:"title"`
		Type    string                  `json:"type"`
		Targets []struct{ Expr string } `json:"targets"`
		Panels  []json.RawMessage       `json:"panels"`
	}
	var dash struct {
		UID        string            `json:"uid"`
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	exprs := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(raws []json.RawMessage) {
		for _, r := range raws {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: a panel: %v", dashboardFile, err)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
			}
			for i, tg := range p.Targets {
				exprs[fmt.Sprintf("panel %q query %d", p.Title, i+1)] = tg.Expr
			}
		}
	}
	walk(dash.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if json.Unmarshal(v.Query, &q) != nil {
			json.Unmarshal(v.Query, &q.Query)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("%s: variable %s: query %q, want label_values(metric, label)", dashboardFile, v.Name, q.Query)
			continue
		}
		exprs["variable "+v.Name] = fmt.Sprintf("group by (%s) (%s)", m[2], m[1])
	}
	if dash.UID == "" || len(exprs) < 10 {
		t.Errorf("%s: uid %q and %d queries, want a uid and the panels of the metrics", dashboardFile, dash.UID, len(exprs))
	}
	return exprs
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alertRules reads the Prometheus rule file, checking each rule has what an
// alert needs: a name, a severity and a summary.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var rules []alertRule
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: rule %+v lacks an alert name, expr, severity or summary", alertsFile, r)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: %s: for: %v", alertsFile, r.Alert, err)
				}
			}
			if slices.ContainsFunc(rules, func(o alertRule) bool { return o.Alert == r.Alert }) {
				t.Errorf("%s: alert %s twice", alertsFile, r.Alert)
			}
			rules = append(rules, r)
		}
	}
	if len(rules) < 5 {
		t.Errorf("%s has %d rules, want the suggested ones", alertsFile, len(rules))
	}
	return rules
}

// codeBlocks returns the contents of the markdown fenced blocks of lang.
func codeBlocks(doc, lang string) []string {
	var out []string
	var cur *strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return out
}
