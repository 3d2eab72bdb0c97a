package shaper_test

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// pendingRoutes are routes docs/api.md documents that a branch not merged
// yet registers (route → why); until it is merged they are logged, not
// failed. Empty when every documented route is served.
var pendingRoutes = map[string]string{}

// docRoute finds the routes of the API reference: each is the heading of its
// section, written in code ("### `GET /v1/jobs/{id}`").
var docRoute = regexp.MustCompile("`(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^`?\\s]*)[^`]*`")

// TestAPIReferenceMatchesRoutes holds docs/api.md against the routes a
// running shaper registers: every route it serves has a section there, and
// every route documented there is served (no stale documentation). A
// documented subtree ("GET /debug/pprof/") covers the routes under it.
func TestAPIReferenceMatchesRoutes(t *testing.T) {
	b, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []route
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		for _, m := range docRoute.FindAllStringSubmatch(line, -1) {
			documented = append(documented, route{m[1], m[2]})
		}
	}
	if len(documented) < 10 {
		t.Fatalf("found %d routes in the headings of docs/api.md, want every route of the API", len(documented))
	}

	r := start(t, "policies:\n  - {name: p, outflow: 1/s, queue: 1}\n")
	h := r.Handler()
	mux, ok := h.(interface {
		Patterns() []string
		Handler(*http.Request) (http.Handler, string)
	})
	if !ok {
		t.Fatalf("Shaper.Handler returned a %T, which cannot list its routes", h)
	}
	patterns := mux.Patterns()
	if len(patterns) < 10 {
		t.Fatalf("the shaper registers %d routes: %q", len(patterns), patterns)
	}

	// Every registered route is documented.
	for _, p := range patterns {
		if p == "/" {
			continue // the catch-all: 404 and 405 problems, documented as such
		}
		reg := parsePattern(p)
		if !slices.ContainsFunc(documented, func(d route) bool { return d.covers(reg) }) {
			t.Errorf("route %q is served but has no section in docs/api.md (a heading such as ### `%s %s`)", p, cmp.Or(reg.method, "GET"), reg.path)
		}
	}

	// Every documented route is served.
	for _, d := range documented {
		req := httptest.NewRequest(d.method, samplePath(d.path), nil)
		if _, pattern := mux.Handler(req); pattern != "" && pattern != "/" {
			continue
		}
		if why, ok := pendingRoutes[d.method+" "+d.path]; ok {
			t.Logf("docs/api.md documents %s %s, not served on this branch yet: %s", d.method, d.path, why)
			continue
		}
		t.Errorf("docs/api.md documents %s %s, which the shaper does not serve", d.method, d.path)
	}
}

type route struct{ method, path string }

// parsePattern splits a ServeMux pattern into its method (may be empty)
// and path, with wildcards written plainly ({key...} as {key}, and the
// exact root "/{$}" as "/").
func parsePattern(p string) route {
	method, path, ok := strings.Cut(p, " ")
	if !ok {
		method, path = "", p
	}
	return route{method, strings.ReplaceAll(strings.TrimSuffix(path, "{$}"), "...}", "}")}
}

// covers reports whether the documented route d documents the registered
// route reg: the same path, or a path under d's subtree ("/debug/pprof/"),
// with the same method (GET also documents HEAD; a pattern without a
// method takes every method). The root "/" is the root alone.
func (d route) covers(reg route) bool {
	pathOK := d.path == reg.path || d.path != "/" && strings.HasSuffix(d.path, "/") && strings.HasPrefix(reg.path, d.path)
	methodOK := reg.method == "" || reg.method == d.method || reg.method == "HEAD" && d.method == "GET"
	return pathOK && methodOK
}

// samplePath fills each wildcard of a documented path with a value.
func samplePath(path string) string {
	return regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(path, "1")
}
