package integration

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/client"
)

// upgradeFixture is a store written by the previous release (before the
// partitioned drain) with jobs queued, deferred and dead, and a live
// override; testdata/upgrade/README.txt says how it was made.
const upgradeFixture = "testdata/upgrade/store.tar.gz"

// upgradeManifest is the fixture's manifest.json: what the previous
// release answered.
type upgradeManifest struct {
	Release string `json:"release"`
	Jobs    []struct {
		Policy  string `json:"policy"`
		Key     string `json:"key"`
		ID      string `json:"id"`
		Payload string `json:"payload"`
		State   string `json:"state"` // queued (202), deferred (429 deferred) or dead
	} `json:"jobs"`
}

// TestUpgradeKeepsQueuedJobs starts this tree's shaper on the fixture's
// store, with the policy file it was written with, and checks that the
// upgrade loses nothing and needs no step: before any consumer, every job
// is still queued, deferred or dead as the previous release left it, and
// the live override (orders at 2/s) applies; once a consumer subscribes,
// every queued and deferred job is delivered exactly once, in its key's
// order, at the overridden rate, and is then known as delivered; the dead
// letter is still listed. The second run sets partitions: 4 on orders, so
// that the jobs of the old layout are drained in partitions.
func TestUpgradeKeepsQueuedJobs(t *testing.T) {
	needBinaries(t)
	for _, partitions := range []int{1, 4} {
		t.Run("partitions="+strconv.Itoa(partitions), func(t *testing.T) { testUpgrade(t, partitions) })
	}
}

func testUpgrade(t *testing.T, partitions int) {
	dir := t.TempDir()
	extractTarGz(t, upgradeFixture, dir)
	var m upgradeManifest
	readJSON(t, filepath.Join(dir, "manifest.json"), &m)
	policyFile := filepath.Join(dir, "policies.yaml")
	if partitions > 1 {
		withPartitions(t, policyFile, "orders", partitions)
	}
	ports := freePorts(t, 2)
	cfg := shaperConfig{
		policies:   policyFile,
		httpAddr:   "127.0.0.1:" + strconv.Itoa(ports[0]),
		data:       filepath.Join(dir, "data"),
		natsListen: "127.0.0.1:" + strconv.Itoa(ports[1]),
		// The fixture was written with this TTL, so that its records and
		// horizon marks do not age out; the default would drop them a day
		// after it was made, as it drops any record a day old.
		extra: []string{"--job-ttl", "87600h"},
	}
	startShaper(t, cfg)
	api, err := client.New("http://"+cfg.httpAddr, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// As the previous release left them, before any consumer.
	var want []string              // queued and deferred: to be delivered
	order := map[string][]string{} // policy/key → ids in submission order
	var dead string
	for _, j := range m.Jobs {
		wantStatus := map[string]client.JobStatus{"queued": client.JobQueued, "deferred": client.JobDeferred, "dead": client.JobDead}[j.State]
		if got, err := api.Job(ctx, j.ID); err != nil || got.Status != wantStatus {
			t.Errorf("before delivery: job %s (%s %q, %s in the previous release) = %+v, %v; want %s", j.ID, j.Policy, j.Key, j.State, got, err, wantStatus)
		}
		switch j.State {
		case "dead":
			dead = j.ID
		default:
			want = append(want, j.ID)
			order[j.Policy+"/"+j.Key] = append(order[j.Policy+"/"+j.Key], j.ID)
		}
	}
	if len(want) < 40 || dead == "" {
		t.Fatalf("manifest of release %s: %d jobs to deliver, dead %q; want ≥ 40 and one", m.Release, len(want), dead)
	}
	orders, err := api.Policy(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if orders.Outflow.String() != "2/s" || !orders.Override || orders.Partitions != partitions {
		t.Errorf("GET /v1/policies/orders: outflow %v, override %v, partitions %d; want the override's 2/s, true, %d",
			orders.Outflow, orders.Override, orders.Partitions, partitions)
	}
	checkDead(t, api, dead)

	rec := record(t, cfg.clientURL(), "shaper.out.>")
	start := time.Now()
	rep := rec.waitAll(want, 60*time.Second)
	time.Sleep(time.Second) // a duplicate would come now
	rep = rec.report(want)
	t.Logf("release %s → this tree, partitions %d: %d of %d jobs delivered in %v, %d duplicates, %d unknown",
		m.Release, partitions, len(want)-len(rep.missing), len(want), rec.lastAt().Sub(start).Round(time.Millisecond), rep.duplicates, rep.unknown)
	if len(rep.missing) > 0 || rep.duplicates > 0 || rep.unknown > 0 {
		t.Errorf("%d jobs never delivered (%v), %d duplicate deliveries, %d unknown jobs delivered; want every job once",
			len(rep.missing), firstFew(rep.missing, 5), rep.duplicates, rep.unknown)
	}
	for pk, ids := range order {
		key := pk[strings.Index(pk, "/")+1:]
		if got := rec.order(key); !slices.Equal(got, ids) {
			t.Errorf("%s: delivered in the order %v, want %v (per-key FIFO)", pk, got, ids)
		}
	}
	checkPaced(t, rec, order, 2)

	// Known as delivered (records are written without waiting: poll).
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range want {
		for {
			got, err := api.Job(ctx, id)
			if err == nil && got.Status == client.JobDelivered {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("after delivery: job %s = %+v, %v; want delivered", id, got, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if got, err := api.Job(ctx, dead); err != nil || got.Status != client.JobDead {
		t.Errorf("after delivery: dead job %s = %+v, %v; want dead", dead, got, err)
	}
	for _, name := range []string{"orders", "emails"} {
		// A delivered job keeps its queue slot for up to a slot of its key
		// (the hold after delivery): the last ones count as queued a moment.
		p, err := api.Policy(ctx, name)
		for wait := time.Now().Add(5 * time.Second); err == nil && p.Queued+p.DeferredQueued > 0 && time.Now().Before(wait); {
			time.Sleep(100 * time.Millisecond)
			p, err = api.Policy(ctx, name)
		}
		if err != nil || p.Queued != 0 || p.DeferredQueued != 0 {
			t.Errorf("after delivery: %s queued %d, deferred %d (%v) 5 s on; want none", name, p.Queued, p.DeferredQueued, err)
		}
		if name == "orders" && len(p.DrainingPartitions) != partitions {
			t.Errorf("orders: this shaper drains partitions %v, want all %d", p.DrainingPartitions, partitions)
		}
	}
}

// checkDead fails t unless hooks lists dead letter id, and nothing else.
func checkDead(t *testing.T, api *client.Client, id string) {
	t.Helper()
	l, err := api.DeadLetters(context.Background(), client.DeadFilter{Policy: "hooks"})
	if err != nil || len(l) != 1 || l[0].ID != id || l[0].Key != "h1" {
		t.Errorf("GET /v1/dead?policy=hooks = %+v, %v; want the dead letter %s of key h1", l, err, id)
	}
}

// checkPaced fails t when a key of policy orders was delivered faster
// than rate per second (⌈T·rate⌉+2 in any window T, the bound of the
// other tests), or much slower: the override, not the file's 1/m, paces.
func checkPaced(t *testing.T, rec *recorder, order map[string][]string, rate float64) {
	t.Helper()
	for pk, ids := range order {
		key, ok := strings.CutPrefix(pk, "orders/")
		if !ok {
			continue
		}
		at := rec.keyTimes(key)
		for i := range at {
			for j := i + 1; j < len(at); j++ {
				if n, bound := j-i+1, int(math.Ceil(at[j].Sub(at[i]).Seconds()*rate))+2; n > bound {
					t.Errorf("%s: %d deliveries in %v, want at most %d at %v/s", pk, n, at[j].Sub(at[i]), bound, rate)
					return
				}
			}
		}
		if n := len(ids); n > 1 {
			if span, most := at[len(at)-1].Sub(at[0]), time.Duration(float64(n)/rate*float64(time.Second))+3*time.Second; span > most {
				t.Errorf("%s: %d deliveries over %v, want at most %v at %v/s", pk, n, span, most, rate)
			}
		}
	}
}

// withPartitions rewrites the policy file at path so that policy name is
// drained in n partitions (a field the previous release did not have).
func withPartitions(t *testing.T, path, name string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	item := "  - name: " + name + "\n"
	s := strings.Replace(string(b), item, item+"    partitions: "+strconv.Itoa(n)+"\n", 1)
	if s == string(b) {
		t.Fatalf("%s: no policy %s to partition", path, name)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// extractTarGz extracts the regular files and directories of the archive
// at path into dir.
func extractTarGz(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(filepath.Separator)) {
			t.Fatalf("%s: %q is outside the archive's root", path, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			err = writeFileFrom(name, tr)
		default:
			err = fmt.Errorf("%q: unexpected entry type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
}

func writeFileFrom(name string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
