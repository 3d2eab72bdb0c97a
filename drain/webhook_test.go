package drain_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// A webhook's redirect is a failed attempt, not followed: following a 302
// would deliver a GET without the job's body elsewhere and count it
// delivered. A 429 or 503 asking for no pause (Retry-After 0, or a date
// past) is a failed attempt too, with the policy's backoff; one asking
// for a pause is that pause.
func TestWebhookAnswers(t *testing.T) {
	var elsewhere atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/elsewhere":
			elsewhere.Add(1)
		case "/302":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/307":
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		case "/503-0":
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/429-past":
			w.Header().Set("Retry-After", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
		case "/503-2":
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	deliver := func(path string) error {
		s := drain.NewWebhookSink(srv.URL+path, 5*time.Second, nil)
		return s.Deliver(context.Background(), &drain.Delivery{Policy: "p", Token: "k", Msg: &queue.Msg{Seq: 1, Token: "k", Job: queue.Job{ID: "j", Key: "k", Payload: []byte("x")}}})
	}
	for _, path := range []string{"/302", "/307", "/503-0", "/429-past"} {
		err := deliver(path)
		var pause *drain.RetryAfterError
		if !errors.Is(err, drain.ErrDelivery) || errors.As(err, &pause) {
			t.Errorf("webhook %s: %v, want a failed delivery (ErrDelivery), no pause", path, err)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirects were followed %d times, want never", n)
	}
	var pause *drain.RetryAfterError
	if err := deliver("/503-2"); !errors.As(err, &pause) || pause.After != 2*time.Second {
		t.Errorf("webhook 503 with Retry-After 2: %v, want a pause of 2 s", err)
	}
}
