package shaper_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper"
)

// deferredPage is one answer of GET /v1/deferred.
type deferredPage struct {
	code     int
	Deferred []shaper.DeferredJob
	Next     *string
	Detail   string
}

func (r *running) deferred(t *testing.T, query url.Values) deferredPage {
	t.Helper()
	resp, err := http.Get(r.base + "/v1/deferred?" + query.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := deferredPage{code: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// 250 jobs deferred behind a full queue list in pages of 100: 100, 100, 50
// and no next, in the order they were deferred, each with its key, id and
// next try; a key's list pages alike; a bad limit or cursor is a 400.
func TestDeferredJobsPage(t *testing.T) {
	// Nobody consumes the deliveries: the queued job stays, and so do the
	// jobs deferred behind it.
	r := start(t, `
policies:
  - name: d
    outflow: 10/s
    queue: 1
    overflow: defer
  - name: other
    outflow: 10/s
    queue: 1
    overflow: defer
`)
	var ids []string
	for i := range 251 {
		a := r.post(t, "d", "k", []byte(fmt.Sprint("job ", i)))
		if i > 0 && (a.code != http.StatusTooManyRequests || a.body["deferred"] != true) {
			t.Fatalf("submission %d = %d %v, want deferred", i, a.code, a.body)
		}
		if i > 0 {
			ids = append(ids, a.body["id"].(string))
		}
	}
	for i := range 6 {
		r.post(t, "d", "j", []byte(fmt.Sprint("job ", i)))
	}

	var sizes []int
	var listed []shaper.DeferredJob
	waitFor(t, "every deferred job's record", 10*time.Second, func() bool {
		sizes, listed = nil, nil
		q := url.Values{"policy": {"d"}, "key": {"k"}, "limit": {"100"}}
		for {
			p := r.deferred(t, q)
			if p.code != http.StatusOK {
				t.Fatalf("GET /v1/deferred?%s = %d %s", q.Encode(), p.code, p.Detail)
			}
			sizes, listed = append(sizes, len(p.Deferred)), append(listed, p.Deferred...)
			if p.Next == nil {
				break
			}
			q.Set("after", *p.Next)
		}
		for _, j := range listed {
			if j.NextTry.IsZero() {
				return false
			}
		}
		return true
	})
	if fmt.Sprint(sizes) != "[100 100 50]" {
		t.Errorf("key k's deferred jobs in pages of 100: %v, want [100 100 50]", sizes)
	}
	for i, j := range listed {
		if i >= len(ids) || j.ID != ids[i] || j.Key != "k" || j.Policy != "d" || j.Deferrals != 0 || j.DeferredAt.IsZero() || j.Size != len(fmt.Sprint("job ", i+1)) {
			t.Fatalf("deferred job %d listed: %+v, want job %d deferred, of key k, with its size", i, j, i+1)
		}
	}
	// Past its next try, the first says why it is still deferred, as its
	// job status does.
	waitFor(t, "the first deferred job past its next try to say why", 10*time.Second, func() bool {
		p := r.deferred(t, url.Values{"policy": {"d"}, "key": {"k"}, "limit": {"1"}})
		return len(p.Deferred) == 1 && strings.Contains(p.Deferred[0].Reason, "waiting for a consumer since")
	})

	// Every policy's: d's 255, then other's none.
	q := url.Values{"limit": {"100"}}
	n := 0
	for pages := 0; ; pages++ {
		p := r.deferred(t, q)
		n += len(p.Deferred)
		if p.Next == nil || pages > 5 {
			break
		}
		q.Set("after", *p.Next)
	}
	if n != 255 {
		t.Errorf("every policy's deferred jobs: %d listed, want 255", n)
	}

	dCursor := r.deferred(t, url.Values{"policy": {"d"}, "limit": {"1"}}).Next
	if dCursor == nil {
		t.Fatal("a page of 1 of 255 deferred jobs without a next")
	}
	for _, c := range []struct {
		query url.Values
		code  int
		want  string
	}{
		{url.Values{"limit": {"0"}}, http.StatusBadRequest, "limit"},
		{url.Values{"limit": {"1001"}}, http.StatusBadRequest, "from 1 to 1000"},
		{url.Values{"after": {"%%"}}, http.StatusBadRequest, "not a cursor"},
		{url.Values{"policy": {"other"}, "after": {*dCursor}}, http.StatusBadRequest, "a cursor of policy"},
		{url.Values{"policy": {"nope"}}, http.StatusNotFound, "unknown policy"},
		{url.Values{"key": {strings.Repeat("k", 300)}}, http.StatusBadRequest, "key"},
	} {
		p := r.deferred(t, c.query)
		if p.code != c.code || !strings.Contains(p.Detail, c.want) {
			t.Errorf("GET /v1/deferred?%s = %d %q, want %d saying %q", c.query.Encode(), p.code, p.Detail, c.code, c.want)
		}
	}
}
