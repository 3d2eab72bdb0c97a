package shaper_test

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// A light reading of PromQL, enough to check that the dashboard's queries
// and the alert rules name what a shaper exports: the metric selectors with
// their label matchers, and the labels of by, without, on, ignoring,
// group_left and group_right. Strings, ranges ([5m], [$__rate_interval]),
// numbers, durations and Grafana variables are skipped.

// selector is a metric name with its label matchers.
type selector struct {
	metric   string
	matchers []matcher
}

type matcher struct{ label, op, value string }

// promRefs is what one expression names.
type promRefs struct {
	selectors []selector
	grouping  []string // labels of by (…), on (…), …
}

var (
	groupingWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	keywords      = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true, "start": true, "end": true}
	functions     = map[string]bool{}
	matcherRE     = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*$`)
)

func init() {
	for _, f := range strings.Fields(`sum avg min max count group stddev stdvar topk bottomk quantile count_values limitk
		rate irate increase delta idelta deriv changes resets predict_linear histogram_quantile histogram_count histogram_sum
		histogram_fraction abs absent absent_over_time ceil floor round clamp clamp_min clamp_max exp ln log2 log10 sqrt sgn
		scalar vector time timestamp sort sort_desc label_replace label_join avg_over_time min_over_time max_over_time
		sum_over_time count_over_time last_over_time quantile_over_time present_over_time day_of_week hour minute`) {
		functions[f] = true
	}
}

func isIdent(c byte, first bool) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}

// parsePromQL returns what expr names, or an error for what it cannot read
// (an unknown function, an unbalanced brace, a matcher it does not know).
func parsePromQL(expr string) (promRefs, error) {
	var refs promRefs
	lastMetric := -1 // index in refs.selectors of a metric name just read
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '"' || c == '\'' || c == '`':
			end := closing(expr, i)
			if end < 0 {
				return refs, fmt.Errorf("unterminated string at %d", i)
			}
			i = end + 1
		case c == '[':
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return refs, fmt.Errorf("unterminated range at %d", i)
			}
			i += end + 1
			continue // a range keeps the selector before it
		case c == '$': // a Grafana variable: $name or ${name}
			i++
			if i < len(expr) && expr[i] == '{' {
				i += strings.IndexByte(expr[i:], '}') + 1
			}
			for i < len(expr) && isIdent(expr[i], false) {
				i++
			}
		case c == '{':
			end := i + 1
			for end < len(expr) && expr[end] != '}' {
				if expr[end] == '"' || expr[end] == '\'' {
					if end = closing(expr, end); end < 0 {
						return refs, fmt.Errorf("unterminated string in a selector at %d", i)
					}
				}
				end++
			}
			if end >= len(expr) {
				return refs, fmt.Errorf("unterminated selector at %d", i)
			}
			ms, err := matchers(expr[i+1 : end])
			if err != nil {
				return refs, err
			}
			if lastMetric >= 0 {
				refs.selectors[lastMetric].matchers = ms
			} else {
				refs.selectors = append(refs.selectors, selector{matchers: ms})
			}
			i = end + 1
		case isIdent(c, true):
			start := i
			for i < len(expr) && isIdent(expr[i], false) {
				i++
			}
			word := expr[start:i]
			next := i
			for next < len(expr) && (expr[next] == ' ' || expr[next] == '\n' || expr[next] == '\t') {
				next++
			}
			paren := next < len(expr) && expr[next] == '('
			switch {
			case groupingWords[word] && paren:
				end := strings.IndexByte(expr[next:], ')')
				if end < 0 {
					return refs, fmt.Errorf("unterminated %s (…)", word)
				}
				for _, l := range strings.Split(expr[next+1:next+end], ",") {
					if l = strings.TrimSpace(l); l != "" {
						refs.grouping = append(refs.grouping, l)
					}
				}
				i = next + end + 1
			case functions[word]: // sum by (…) (…) too
			case paren:
				return refs, fmt.Errorf("unknown function %s", word)
			case groupingWords[word] || keywords[word]:
			default:
				refs.selectors = append(refs.selectors, selector{metric: word})
				lastMetric = len(refs.selectors) - 1
				continue
			}
		case '0' <= c && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i], false) || expr[i] == '.') {
				i++ // a number, or a duration after offset
			}
		default:
			i++ // operators, parentheses, commas
		}
		lastMetric = -1
	}
	return refs, nil
}

// closing returns the index of the quote closing the string that starts at
// i, or -1.
func closing(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j
		}
	}
	return -1
}

// matchers reads the label matchers between a selector's braces.
func matchers(s string) ([]matcher, error) {
	var out []matcher
	for _, part := range splitOutsideQuotes(s) {
		if strings.TrimSpace(part) == "" {
			continue
		}
		m := matcherRE.FindStringSubmatch(part)
		if m == nil {
			return nil, fmt.Errorf("label matcher %q", part)
		}
		out = append(out, matcher{m[1], m[2], m[3][1 : len(m[3])-1]})
	}
	return out, nil
}

func splitOutsideQuotes(s string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"', '\'':
			if j := closing(s, i); j > 0 {
				i = j
			}
		case ',':
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// exported is what a scrape exposes: each series name (a histogram's
// _bucket, _sum and _count) with its labels and the values seen of each.
type exported map[string]map[string]map[string]bool

// targetLabels are added by Prometheus to every series it scrapes, and
// synthetic the series it makes for every target.
var (
	targetLabels = []string{"job", "instance"}
	synthetic    = []string{"up"}
)

func exportedOf(families map[string]*dto.MetricFamily) exported {
	x := exported{}
	add := func(name string, m *dto.Metric, extra ...string) {
		if x[name] == nil {
			x[name] = map[string]map[string]bool{}
		}
		labels := append(m.GetLabel(), nil)
		for _, l := range labels[:len(labels)-1] {
			if x[name][l.GetName()] == nil {
				x[name][l.GetName()] = map[string]bool{}
			}
			x[name][l.GetName()][l.GetValue()] = true
		}
		for _, l := range extra {
			if x[name][l] == nil {
				x[name][l] = map[string]bool{}
			}
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_bucket", m, "le")
				add(name+"_sum", m)
				add(name+"_count", m)
			case dto.MetricType_SUMMARY:
				add(name, m, "quantile")
				add(name+"_sum", m)
				add(name+"_count", m)
			default:
				add(name, m)
			}
		}
	}
	for _, s := range synthetic {
		x[s] = map[string]map[string]bool{}
	}
	return x
}

// check returns what expr names that x does not export: a metric, a label
// of a matcher or of a grouping (which every metric of expr must have), or
// a value an equality matcher asks for (Grafana variables excepted).
func (x exported) check(expr string) []error {
	refs, err := parsePromQL(expr)
	if err != nil {
		return []error{fmt.Errorf("cannot read %q: %v", expr, err)}
	}
	if len(refs.selectors) == 0 {
		return []error{fmt.Errorf("%q names no metric", expr)}
	}
	var errs []error
	for _, s := range refs.selectors {
		labels, ok := x[s.metric]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: /metrics exports no such series", s.metric))
			continue
		}
		for _, m := range s.matchers {
			if slices.Contains(targetLabels, m.label) {
				continue
			}
			values, ok := labels[m.label]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s has no label %s (it has %v)", s.metric, m.label, keys(labels)))
			case m.op == "=" && m.value != "" && !strings.Contains(m.value, "$") && !values[m.value]:
				errs = append(errs, fmt.Errorf("%s{%s=%q}: no such series (values: %v)", s.metric, m.label, m.value, keys(values)))
			}
		}
		for _, l := range refs.grouping {
			if _, ok := labels[l]; !ok && !slices.Contains(targetLabels, l) {
				errs = append(errs, fmt.Errorf("%s has no label %s to group by (it has %v)", s.metric, l, keys(labels)))
			}
		}
	}
	return errs
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The reader finds what a query names, and check refuses a metric, a label
// or a value that is not exported.
func TestPromQLReader(t *testing.T) {
	x := exported{
		"shaper_jobs_admitted_total":   {"policy": {"a": true}},
		"shaper_queue_duration_bucket": {"policy": {"a": true}, "le": {}},
		"up":                           {},
	}
	for _, expr := range []string{
		`sum by (policy) (rate(shaper_jobs_admitted_total{policy=~"$policy"}[$__rate_interval]))`,
		`histogram_quantile(0.99, sum by (le, policy) (rate(shaper_queue_duration_bucket[5m]))) > 0.5`,
		`sum(rate(shaper_jobs_admitted_total{policy="a"}[5m] offset 1h)) by (policy, instance)`,
		`up{job="shaper"} == 0`,
		`max by (policy) (shaper_jobs_admitted_total) > 0 and on (policy) sum by (policy) (shaper_jobs_admitted_total) == 0`,
	} {
		if errs := x.check(expr); len(errs) > 0 {
			t.Errorf("check(%s) = %v, want nothing", expr, errs)
		}
	}
	for expr, want := range map[string]string{
		`rate(shaper_jobs_admited_total[5m])`:                            "shaper_jobs_admited_total",
		`sum by (queue) (rate(shaper_jobs_admitted_total[5m]))`:          "no label queue",
		`shaper_jobs_admitted_total{policy="b"}`:                         `policy="b"`,
		`shaper_jobs_admitted_total{key="k"}`:                            "no label key",
		`histogram_quantil(0.9, rate(shaper_queue_duration_bucket[5m]))`: "unknown function",
		`sum without (le) (rate(shaper_jobs_admitted_total[5m]))`:        "no label le",
		`rate(shaper_jobs_admitted_total{policy="a"[5m])`:                "unterminated",
		`1 + 1`: "names no metric",
		`sum(rate(shaper_jobs_admitted_total[5m])) by (policy, outcome)`:                                     "no label outcome",
		`shaper_jobs_admitted_total{policy=~"a"} / shaper_jobs_dead_total`:                                   "shaper_jobs_dead_total",
		`label_replace(shaper_jobs_admitted_total, "x", "$1", "policy", "(.*)") > shaper_queue_duration_sum`: "shaper_queue_duration_sum",
	} {
		errs := x.check(expr)
		if len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), want) {
			t.Errorf("check(%s) = %v, want an error naming %s", expr, errs, want)
		}
	}
}
