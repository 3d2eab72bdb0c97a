package shaper_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

// When JetStream has no storage left (here its server's max_file_store
// of 4 MiB, rather than a full disk), a submission is a 503 saying so
// with a Retry-After, not a generic backend error, and /readyz is not
// ready, with the reason. Once a consumer takes jobs and frees room, a
// job is stored and the shaper is ready again.
func TestStorageFull(t *testing.T) {
	ns := testenv.NATSWith(t, func(o *server.Options) { o.JetStreamMaxStore = 4 << 20 })
	r := wrap(t, testenv.Shaper(t, shaper.Config{NATSURL: ns.ClientURL(), Policies: testenv.Policies(t,
		"policies:\n  - {name: p, outflow: 100/s, queue: 1000}\n")}))
	payload := bytes.Repeat([]byte("x"), 64<<10)

	var refused answer
	for i := 0; ; i++ {
		a := r.post(t, "p", "k"+strconv.Itoa(i%10), payload)
		if a.code == http.StatusServiceUnavailable {
			refused = a
			break
		}
		if a.code != http.StatusAccepted || i > 200 {
			t.Fatalf("job %d of 64 KiB into a 4 MiB store: %d %v, want 202 until the store is full, then 503", i, a.code, a.body)
		}
	}
	if d, _ := refused.body["detail"].(string); !strings.HasPrefix(d, "queue backend out of storage: JetStream has no room left") || !strings.Contains(d, "insufficient resources") {
		t.Errorf("503 of a full store: detail %q, want it to say the store is out of storage", d)
	}
	if ra := refused.header.Get("Retry-After"); ra == "" {
		t.Error("503 of a full store without Retry-After")
	}
	code, status := readyz(t, r)
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(status, "storage full: JetStream has refused jobs for want of room since ") {
		t.Errorf("/readyz with the store full = %d %q, want 503 saying the storage is full", code, status)
	}

	testenv.Consume(t, ns.ClientURL(), "shaper.out.p.>")
	waitFor(t, "a job stored once the consumer freed room", 20*time.Second, func() bool {
		return r.post(t, "p", "again", []byte("x")).code == http.StatusAccepted
	})
	if code, status := readyz(t, r); code != http.StatusOK {
		t.Errorf("/readyz once a job was stored = %d %q, want 200", code, status)
	}
}

// readyz returns the status code and status of r's /readyz.
func readyz(t *testing.T, r *running) (int, string) {
	t.Helper()
	resp, err := http.Get(r.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body struct{ Status string }
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("/readyz: %d %q: %v", resp.StatusCode, b, err)
	}
	return resp.StatusCode, body.Status
}

// A job is stored and delivered as one NATS message with its headers, so
// a NATS server's max_payload (1 MiB by default) bounds the payload a
// shaper takes: under the server's limit less the headers' room a job is
// answered 202 and delivered, over it 413, never a 202 for a job that
// cannot be delivered.
func TestPayloadFitsTheServer(t *testing.T) {
	ns := testenv.NATS(t) // max_payload 1 MiB
	r := wrap(t, testenv.Shaper(t, shaper.Config{NATSURL: ns.ClientURL(), Policies: testenv.Policies(t,
		"policies:\n  - {name: p, outflow: 100/s, queue: 10}\n")}))
	got := testenv.Consume(t, ns.ClientURL(), "shaper.out.p.>")
	limit := 1<<20 - 64<<10
	if a := r.post(t, "p", "big", bytes.Repeat([]byte("x"), limit+1)); a.code != http.StatusRequestEntityTooLarge {
		t.Errorf("a job of %d bytes, over what a NATS server of max_payload 1 MiB carries with its headers: %d %v, want 413", limit+1, a.code, a.body)
	} else if d, _ := a.body["detail"].(string); !strings.Contains(d, strconv.Itoa(limit)) {
		t.Errorf("413 detail %q, want the limit %d", d, limit)
	}
	if a := r.post(t, "p", "big", bytes.Repeat([]byte("x"), limit)); a.code != http.StatusAccepted {
		t.Fatalf("a job of %d bytes: %d %v, want 202", limit, a.code, a.body)
	}
	waitFor(t, "the largest job delivered", 10*time.Second, func() bool { return got.Load() == 1 })
}

// A cluster that lost its quorum keeps the shaper's connection up but
// stores nothing (every job is answered 503): /readyz says so, not
// ready, from a lease TTL after the last stored renewal of the
// shaper's membership, and is ready again once JetStream stores again.
// Here the server's JetStream is switched off and on.
func TestNotReadyWhileJetStreamStoresNothing(t *testing.T) {
	dir := t.TempDir()
	ns := testenv.NATSAt(t, dir)
	r := wrap(t, testenv.Shaper(t, shaper.Config{NATSURL: ns.ClientURL(), LeaseTTL: 1200 * time.Millisecond, Policies: testenv.Policies(t,
		"policies:\n  - {name: p, outflow: 100/s, queue: 10}\n")}))
	if code, status := readyz(t, r); code != http.StatusOK {
		t.Fatalf("/readyz at start = %d %q, want 200", code, status)
	}
	if err := ns.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	var status string
	waitFor(t, "/readyz to say JetStream stores nothing", 10*time.Second, func() bool {
		var code int
		code, status = readyz(t, r)
		return code == http.StatusServiceUnavailable
	})
	if !strings.HasPrefix(status, "JetStream stores nothing: no renewal of this shaper's membership stored since ") {
		t.Errorf("/readyz without JetStream: %q, want it to say JetStream stores nothing", status)
	}
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: dir}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/readyz ready again with JetStream back", 20*time.Second, func() bool {
		code, _ := readyz(t, r)
		return code == http.StatusOK
	})
}

// Jobs never fill the store: the shaper refuses them (503, storage full)
// before its last 1/32, kept for the drain lease, the membership and the
// job records. So a store filled while no consumer is online keeps its
// drain past several lease TTLs, and a consumer that subscribes
// afterwards receives every job answered 202. (Without the reserve the
// store refused the lease's renewals, the drain stopped a lease TTL after
// the store filled, and the consumer got nothing.) The store's limit is
// the embedded server's (MaxStore), or an external server's account's.
func TestFullStoreKeepsItsDrain(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		fullStoreKeepsItsDrain(t, shaper.Config{MaxStore: 4 << 20})
	})
	t.Run("account limit", func(t *testing.T) {
		ns := testenv.NATS(t)
		if err := ns.GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{
			"": {MaxStore: 4 << 20, MaxMemory: -1, MaxStreams: -1, MaxConsumers: -1},
		}); err != nil {
			t.Fatal(err)
		}
		fullStoreKeepsItsDrain(t, shaper.Config{NATSURL: ns.ClientURL()})
	})
}

func fullStoreKeepsItsDrain(t *testing.T, cfg shaper.Config) {
	const ttl = time.Second
	cfg.LeaseTTL = ttl
	cfg.Policies = testenv.Policies(t, "policies:\n  - {name: p, outflow: 1000/s, queue: 1000}\n")
	r := wrap(t, testenv.Shaper(t, cfg))
	// 16 producers at once, so that jobs being stored count each other:
	// 16 of 64 KiB are 4 times the room kept.
	payload := bytes.Repeat([]byte("x"), 64<<10)
	var (
		n      atomic.Int64
		detail atomic.Value
		wg     sync.WaitGroup
	)
	for w := range 16 {
		wg.Go(func() {
			for i := 0; i < 100; i++ {
				resp, err := http.Post(r.base+"/v1/jobs/p/k"+strconv.Itoa(w), "application/octet-stream", bytes.NewReader(payload))
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusAccepted:
					n.Add(1)
				case http.StatusServiceUnavailable:
					detail.Store(string(body))
					return
				default:
					t.Errorf("a job of 64 KiB into a 4 MiB store: %d %s, want 202 until the store is full, then 503", resp.StatusCode, body)
					return
				}
			}
		})
	}
	wg.Wait()
	if d, _ := detail.Load().(string); !strings.Contains(d, "kept for the shapers' own writes") {
		t.Errorf("503 of a store at its reserve: %q, want it to say what the room is kept for", d)
	}
	accepted := int(n.Load())
	if accepted < 40 {
		t.Fatalf("%d jobs of 64 KiB accepted into a 4 MiB store, want most of it used", accepted)
	}
	// /metrics shows how full the store is, before the 503s tell.
	gauge := func(name string) float64 {
		f := scrape(t, r.base)[name]
		if f == nil || len(f.Metric) != 1 {
			t.Errorf("/metrics has no %s", name)
			return 0
		}
		return f.Metric[0].GetGauge().GetValue()
	}
	limit, kept, used := gauge("shaper_jetstream_storage_limit_bytes"), gauge("shaper_jetstream_storage_kept_bytes"), gauge("shaper_jetstream_storage_used_bytes")
	if limit != 4<<20 || kept != 256<<10 || used < limit-kept-128<<10 || used > limit-kept {
		t.Errorf("/metrics of a store at its reserve: used %v, limit %v, kept %v; want 4 MiB, 256 KiB, and used within 2 jobs below limit - kept", used, limit, kept)
	}
	time.Sleep(3 * ttl) // no consumer: every lease renewal must still be stored
	got := testenv.Consume(t, r.NATSURL(), "shaper.out.p.>")
	waitFor(t, "every accepted job delivered to a consumer that came after the store filled", 20*time.Second, func() bool {
		return got.Load() >= int64(accepted)
	})
	if n := got.Load(); n != int64(accepted) {
		t.Errorf("%d deliveries of %d accepted jobs", n, accepted)
	}
	waitFor(t, "a job stored once the drain freed room", 10*time.Second, func() bool {
		return r.post(t, "p", "again", []byte("x")).code == http.StatusAccepted
	})
	// Delivered too, so that the shaper does not stop with a delivery in
	// flight to the consumer the test closes first.
	waitFor(t, "the job stored after", 10*time.Second, func() bool { return got.Load() > int64(accepted) })
}
