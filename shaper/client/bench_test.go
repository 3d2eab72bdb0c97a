package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// BenchmarkSubmitHTTP is the cost of Client.Submit against a request built
// and answered by hand (the producer's way before this package), both to a
// trivial handler answering 202 with a shaper-like body. The figure to
// watch is allocs/op: Submit adds the three strings of its Result. Speed
// is measured from outside the process (see BENCHMARKS.md).
func BenchmarkSubmitHTTP(b *testing.B) {
	body := []byte(decodeSeeds[0])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		w.Write(body)
	}))
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	payload := make([]byte, 64)
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				u := srv.URL + "/v1/jobs/" + url.PathEscape("bulk") + "/" + url.PathEscape("k1")
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, u, bytes.NewReader(payload))
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/octet-stream")
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
			}
		})
	})
	b.Run("client", func(b *testing.B) {
		c, err := New(srv.URL, Config{HTTPClient: hc})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Submit(context.Background(), "bulk", "k1", payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
