package httpapi

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// FuzzDirect holds HandleDirect's route to http.ServeMux's: for any path
// and method, a Mux with the route and a ServeMux with its pattern give
// the handler the same request, with the same path values, or both give
// it none. (A path the Mux refuses as not canonical is the Mux's own
// rule, and skipped.) `go test -fuzz FuzzDirect ./shaper/internal/httpapi/`
// explores.
func FuzzDirect(f *testing.F) {
	for _, p := range []string{"/v1/jobs/p/k", "/v1/jobs/p/k/", "/v1/jobs/p/a/b/c", "/v1/jobs/p/a%2Fb", "/v1/jobs/p%2Fq/k",
		"/v1/jobs/p/k%20x", "/v1/jobs/p/%C3%A9", "/v1/jobs/p/", "/v1/jobs//k", "/v1/jobs/p", "/v1/jobs/", "/v1/jobs/p/.x",
		"/v1/jobs/p/%2E%2E", "/v1/jobs/p/k?x=1", "/v2/jobs/p/k", "/v1/jobs/p/k%25", "/v1/jobs/p/%ff"} {
		f.Add("POST", p)
	}
	f.Add("GET", "/v1/jobs/p/k")
	f.Fuzz(func(t *testing.T, method, path string) {
		u, err := url.ParseRequestURI(path)
		if err != nil || method == "" || !validMethod(method) {
			return
		}
		type seen struct {
			served      bool
			policy, key string
			status      int
		}
		serve := func(h http.Handler, got *seen) {
			r := &http.Request{Method: method, URL: u, RequestURI: path, Header: http.Header{}, Host: "example"}
			*got = seen{}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			got.status = rec.Code
		}
		var viaMux, viaServeMux seen
		handler := func(got *seen) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				got.served, got.policy, got.key = true, r.PathValue("policy"), r.PathValue("key")
			}
		}
		m := NewMux()
		m.HandleDirect("POST", "/v1/jobs/", "policy", "key", handler(&viaMux))
		plain := http.NewServeMux()
		plain.HandleFunc("POST /v1/jobs/{policy}/{key...}", handler(&viaServeMux))
		serve(m, &viaMux)
		if viaMux.status == http.StatusBadRequest && !viaMux.served {
			return // not canonical: refused by the Mux's rule
		}
		serve(plain, &viaServeMux)
		if viaMux != viaServeMux {
			t.Fatalf("%s %q: HandleDirect's route gave %+v, http.ServeMux %+v", method, path, viaMux, viaServeMux)
		}
	})
}

// validMethod reports whether m is an HTTP token, as a server reads one.
func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		if c := m[i]; c <= ' ' || c >= 0x7f || c == '(' || c == ')' || c == '/' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}
