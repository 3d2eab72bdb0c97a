package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The Bearer scheme's name is case-insensitive (RFC 9110); a refusal says
// what was wrong with what came.
func TestBearer(t *testing.T) {
	h := Bearer("s3cret", "submission")(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, tc := range []struct {
		auth string
		code int
		says string
	}{
		{"Bearer s3cret", 204, ""},
		{"bearer s3cret", 204, ""},
		{"BEARER  s3cret", 204, ""},
		{"", 401, "no Authorization header"},
		{"Basic czNjcmV0", 401, "not of the Bearer scheme"},
		{"Bearer", 401, "not of the Bearer scheme"},
		{"Bearer other", 403, "wrong bearer token"},
	} {
		req := httptest.NewRequest("POST", "/", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		h(rec, req)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.says) {
			t.Errorf("Authorization %q: %d %s, want %d saying %q", tc.auth, rec.Code, rec.Body.String(), tc.code, tc.says)
		}
	}
}
