package httpapi

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/shaper-dev/shaper/internal/suggest"
)

// Query answers 400 and reports false when r's query has a parameter that
// is not one of names, or one given twice: a mistyped filter
// (?polcy=orders) must not be read as no filter, which on a route that
// replays or purges means every policy's, and of ?key=a&key=b only the
// first would be read.
func Query(w http.ResponseWriter, r *http.Request, names ...string) bool {
	for p, vs := range r.URL.Query() {
		switch {
		case !slices.Contains(names, p):
			Error(w, http.StatusBadRequest, "unknown parameter "+Quote(p)+": this route takes "+strings.Join(names, ", ")+suggest.Hint(p, names))
			return false
		case len(vs) > 1:
			Error(w, http.StatusBadRequest, "parameter "+Quote(p)+" given "+strconv.Itoa(len(vs))+" times: give it once")
			return false
		}
	}
	return true
}

// NoBody answers 400 and reports false when r has a body: a route that
// reads its filters from the query must not take a JSON body's filters as
// read and act on everything. done says what did not happen ("nothing was
// purged").
func NoBody(w http.ResponseWriter, r *http.Request, done string) bool {
	if r.ContentLength == 0 || r.Body == nil {
		return true
	}
	// A body that cannot be read (too long, say) is a body too.
	var b [1]byte
	if n, err := io.ReadFull(r.Body, b[:]); n == 0 && (err == nil || err == io.EOF) {
		return true
	}
	Error(w, http.StatusBadRequest, "this route takes no body: its filters are query parameters ("+r.URL.Path+"?policy=…&key=…&reason=…); "+done)
	return false
}
