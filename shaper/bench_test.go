package shaper_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

// The benchmarks below measure the admission paths of a real Shaper
// (embedded JetStream with file storage, HTTP on loopback) against a
// baseline measured in the same run with the same client and concurrency:
//
//	BenchmarkHTTP/trivial        a net/http handler that reads the body and writes 202 + small JSON
//	BenchmarkHTTP/admit          POST /v1/jobs/bulk/{key}: 202, nothing rejected
//	BenchmarkHTTP/full           POST /v1/jobs/tight/full: 429, the key's queue is full
//	BenchmarkNATS/raw-async      JetStream PublishAsync to a plain stream, waiting for every ack
//	BenchmarkNATS/raw-sync       JetStream Publish from the same goroutines as submit (context)
//	BenchmarkNATS/submit-publish submissions published to shaper.submit.bulk.{key} without a reply, pipelined
//	BenchmarkNATS/submit-async   requests to shaper.submit.bulk.{key}, pipelined like raw-async (4096 in flight)
//	BenchmarkNATS/submit         requests to shaper.submit.bulk.{key}, 64 in flight (nc.Request from 64 goroutines)
//
// ns/op is wall time over b.N requests, so 1e9/ns-op is the throughput;
// p99-µs is the 99th percentile latency one request saw.

const (
	benchClients = 32   // HTTP client goroutines over keep-alive connections
	benchNATSReq = 64   // NATS requests in flight
	benchKeys    = 1000 // keys the admissions spread over
)

var benchPayload = bytes.Repeat([]byte("x"), 128)

// benchPolicies: bulk never rejects (queue at the validation maximum, keys
// spread), tight holds one job per key and drains it once an hour.
const benchPolicies = `
policies:
  - name: bulk
    outflow: 1/h
    queue: 1000000
    overflow: reject
  - name: tight
    outflow: 1/h
    queue: 1
    overflow: reject
`

// benchShaper starts a Shaper with benchPolicies, stopped when b ends.
func benchShaper(b *testing.B) *shaper.Shaper {
	b.Helper()
	s := testenv.Shaper(b, shaper.Config{Policies: testenv.Policies(b, benchPolicies)}).Shaper
	testenv.Consume(b, s.NATSURL(), "shaper.out.>")
	return s
}

// benchHTTPClient is one client for every HTTP benchmark: keep-alive
// connections, one per client goroutine.
func benchHTTPClient(b *testing.B) *http.Client {
	tr := &http.Transport{MaxIdleConns: benchClients, MaxIdleConnsPerHost: benchClients, MaxConnsPerHost: benchClients}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// post sends one POST and returns the status code, with the body read to
// the end so the connection is reused.
func benchPost(c *http.Client, url string) (int, error) {
	resp, err := c.Post(url, "application/octet-stream", bytes.NewReader(benchPayload))
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// benchPool runs do b.N times over n goroutines, timing each call, and
// reports the p50 and p99 latency. do gets the call's number and returns
// false on a wrong answer, which fails the benchmark.
func benchPool(b *testing.B, n int, do func(i int) error) {
	b.Helper()
	var (
		next   atomic.Int64
		mu     sync.Mutex
		all    = make([]time.Duration, 0, b.N)
		wg     sync.WaitGroup
		failed atomic.Pointer[error]
	)
	b.ResetTimer()
	cpu0 := cpuTime()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, b.N/n+1)
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N || failed.Load() != nil {
					break
				}
				t0 := time.Now()
				if err := do(i); err != nil {
					failed.CompareAndSwap(nil, &err)
					break
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	reportCPU(b, cpu0)
	reportLatency(b, all)
}

// cpuTime returns the CPU time (user and system) the process has used. The
// machines these benchmarks run on are shared virtual machines: wall time
// per operation moves with the neighbours' load, CPU time per operation far
// less, so both are reported.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per operation since cpu0: the
// server, the client and the embedded JetStream together.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/float64(time.Microsecond), "cpu-µs/op")
	}
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[min(int(q*float64(len(lat))), len(lat)-1)]) / float64(time.Microsecond)
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// BenchmarkHTTP compares HTTP admission (202) and the 429 path of a real
// Shaper with a trivial handler, same client and concurrency.
func BenchmarkHTTP(b *testing.B) {
	trivial := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"0123456789abcdefghij","status":"queued"}`+"\n")
	}))
	b.Cleanup(trivial.Close)
	s := benchShaper(b)
	base := "http://" + s.HTTPAddr()
	c := benchHTTPClient(b)

	// Fill tight/full: the first job is delivered at once and frees its slot
	// within the policy's hold (1 s); the one after it waits an hour.
	fullURL := base + "/v1/jobs/tight/full"
	fill := func() {
		for {
			code, err := benchPost(c, fullURL)
			if err != nil {
				b.Fatal(err)
			}
			if code == http.StatusTooManyRequests {
				return
			}
			if code != http.StatusAccepted {
				b.Fatalf("filling tight/full: %d", code)
			}
		}
	}
	fill()
	time.Sleep(1500 * time.Millisecond)
	fill()

	want := func(url func(i int) string, code int) func(int) error {
		return func(i int) error {
			got, err := benchPost(c, url(i))
			if err != nil {
				return err
			}
			if got != code {
				return fmt.Errorf("POST %s = %d, want %d", url(i), got, code)
			}
			return nil
		}
	}
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = base + fmt.Sprintf("/v1/jobs/bulk/k%d", i)
	}
	b.Run("trivial", func(b *testing.B) {
		benchPool(b, benchClients, want(func(int) string { return trivial.URL + "/v1/jobs/bulk/k" }, http.StatusAccepted))
	})
	b.Run("admit", func(b *testing.B) {
		benchPool(b, benchClients, want(func(i int) string { return keys[i%benchKeys] }, http.StatusAccepted))
	})
	b.Run("full", func(b *testing.B) {
		benchPool(b, benchClients, want(func(int) string { return fullURL }, http.StatusTooManyRequests))
	})
}

// BenchmarkNATS compares NATS admission (requests to the submit subject,
// many in flight) with raw JetStream publishing to a plain stream on the
// same kind of embedded server.
func BenchmarkNATS(b *testing.B) {
	raw := testenv.NATS(b)
	rawNC := testenv.Connect(b, raw)
	js, err := jetstream.New(rawNC, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		b.Fatal(err)
	}
	rawSubj := make([]string, benchKeys)
	for i := range rawSubj {
		rawSubj[i] = fmt.Sprintf("raw.k%d", i)
	}

	s := benchShaper(b)
	nc, err := nats.Connect(s.NATSURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	subj := make([]string, benchKeys)
	for i := range subj {
		subj[i] = fmt.Sprintf("shaper.submit.bulk.k%d", i)
	}

	b.Run("raw-async", func(b *testing.B) {
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := range b.N {
			if _, err := js.PublishAsync(rawSubj[i%benchKeys], benchPayload, jetstream.WithStallWait(30*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			b.Fatalf("%d acks missing after 30s", js.PublishAsyncPending())
		}
		reportCPU(b, cpu0)
	})
	b.Run("raw-sync", func(b *testing.B) {
		ctx := context.Background()
		benchPool(b, benchNATSReq, func(i int) error {
			_, err := js.Publish(ctx, rawSubj[i%benchKeys], benchPayload)
			return err
		})
	})
	b.Run("submit-publish", func(b *testing.B) {
		// Fire and forget: submissions published without a reply subject,
		// pipelined like the raw-async baseline; done when the shaper has
		// admitted them all.
		admitted := func() uint64 {
			for _, st := range s.Status() {
				if st.Name == "bulk" {
					return st.Admitted
				}
			}
			return 0
		}
		want := admitted() + uint64(b.N)
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := range b.N {
			if err := nc.Publish(subj[i%benchKeys], benchPayload); err != nil {
				b.Fatal(err)
			}
			if i%256 == 255 {
				// Keep the pipeline shallow enough that the shaper's
				// subscription never drops messages as a slow consumer.
				for admitted()+16384 < want-uint64(b.N-i-1) {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		for admitted() < want {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d submissions admitted after 60s", admitted()-(want-uint64(b.N)), b.N)
			}
			time.Sleep(100 * time.Microsecond)
		}
		b.StopTimer()
		reportCPU(b, cpu0)
	})
	b.Run("submit-async", func(b *testing.B) {
		// Requests pipelined the way PublishAsync pipelines publishes: one
		// inbox subscription for every reply, at most 4096 unanswered, done
		// when every reply is in. The like-for-like pair of raw-async.
		queued := []byte(`"status":"queued"`)
		inbox := nats.NewInbox()
		window := make(chan struct{}, 4096)
		var (
			got  atomic.Int64
			bad  atomic.Pointer[string]
			done = make(chan struct{})
		)
		sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
			if !bytes.Contains(m.Data, queued) {
				s := string(m.Data)
				bad.CompareAndSwap(nil, &s)
			}
			<-window
			if got.Add(1) == int64(b.N) {
				close(done)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Unsubscribe()
		sub.SetPendingLimits(-1, -1)
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := range b.N {
			window <- struct{}{}
			if err := nc.PublishRequest(subj[i%benchKeys], inbox+"."+strconv.Itoa(i), benchPayload); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			b.Fatalf("%d of %d replies after 60s", got.Load(), b.N)
		}
		b.StopTimer()
		if m := bad.Load(); m != nil {
			b.Fatalf("a reply was not queued: %s", *m)
		}
		reportCPU(b, cpu0)
	})
	b.Run("submit", func(b *testing.B) {
		queued := []byte(`"status":"queued"`)
		benchPool(b, benchNATSReq, func(i int) error {
			m, err := nc.Request(subj[i%benchKeys], benchPayload, 10*time.Second)
			if err != nil {
				return err
			}
			if !bytes.Contains(m.Data, queued) {
				return fmt.Errorf("submit %s: %s", subj[i%benchKeys], m.Data)
			}
			return nil
		})
	})
}

// BenchmarkRefusal is what the Shaper's handler adds to a 429 beside a
// trivial handler's answer, without the network: each request is served
// to a response recorder, so that ns/op and allocs/op are the handlers'
// own (net/http's reading and writing, which both pay, are left out).
//
//	BenchmarkRefusal/trivial   reads the body, answers 429 with a small JSON body
//	BenchmarkRefusal/full      POST /v1/jobs/tight/full on a full key (a consumer subscribed)
func BenchmarkRefusal(b *testing.B) {
	s := benchShaper(b)
	h := s.Handler()
	post := func(url string) *http.Request {
		return httptest.NewRequest(http.MethodPost, url, bytes.NewReader(benchPayload))
	}
	// As in BenchmarkHTTP: the first job is delivered at once and frees
	// its slot within the policy's hold; the one after it waits an hour.
	fill := func() {
		for code := http.StatusAccepted; code != http.StatusTooManyRequests; {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, post("/v1/jobs/tight/full"))
			if code = rec.Code; code != http.StatusAccepted && code != http.StatusTooManyRequests {
				b.Fatalf("filling tight/full: %d %s", code, rec.Body)
			}
		}
	}
	fill()
	time.Sleep(1500 * time.Millisecond)
	fill()
	trivial := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"id":"dn1ml4ye3996-ya","policy":"p","key":"k","queued":1,"eta_ms":0}`)
	})
	run := func(h http.Handler) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, post("/v1/jobs/tight/full"))
				if rec.Code != http.StatusTooManyRequests {
					b.Fatalf("POST /v1/jobs/tight/full = %d, want 429", rec.Code)
				}
			}
		}
	}
	b.Run("trivial", run(trivial))
	b.Run("full", run(h))
}
