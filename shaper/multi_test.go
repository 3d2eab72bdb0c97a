package shaper_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// Two shapers on one JetStream: both admit, one drains each policy, so the
// key's queue size and rate hold across them; when the draining one stops,
// the other takes over and nothing is lost.
func TestTwoShapersShareQueuesAndRate(t *testing.T) {
	ns := testenv.NATS(t)
	set := testenv.Policies(t, `
policies:
  - name: shared
    outflow: 20/s
    queue: 60
`)
	startOne := func(id string) *testenv.Running {
		return testenv.Shaper(t, shaper.Config{Policies: set, NATSURL: ns.ClientURL(), InstanceID: id, LeaseTTL: 1500 * time.Millisecond})
	}
	a, b := startOne("a"), startOne("b")
	nc := testenv.Connect(t, ns)
	wait := collect(t, nc, "shaper.out.shared.>")

	// 70 submissions alternating between the shapers: exactly 60 fit.
	ra, rb := wrap(t, a), wrap(t, b)
	accepted := 0
	for i := range 70 {
		r := ra
		if i%2 == 1 {
			r = rb
		}
		if r.post(t, "shared", "k", []byte(fmt.Sprint(i))).code == http.StatusAccepted {
			accepted++
		}
	}
	// The first delivered jobs may free a slot or two during the loop.
	if accepted < 60 || accepted > 64 {
		t.Errorf("70 submissions through two shapers to a queue of 60: %d accepted, want 60 (a few more as the drain frees slots)", accepted)
	}
	draining := 0
	for _, s := range []*testenv.Running{a, b} {
		if s.Status()[0].Draining {
			draining++
		}
	}
	if draining != 1 {
		t.Errorf("%d shapers drain the policy, want exactly 1", draining)
	}
	wait(20, 10*time.Second)
	// Stop whichever drains; the other must take over.
	if a.Status()[0].Draining {
		a.Stop()
	} else {
		t.Log("b drains; stopping a changes nothing, stopping neither")
	}
	ms := wait(accepted, 30*time.Second)
	seen := map[string]int{}
	for _, m := range ms {
		seen[m.Header.Get(queue.HeaderJobID)]++
	}
	if len(seen) != accepted {
		t.Errorf("%d distinct jobs delivered, want %d", len(seen), accepted)
	}
	dups := len(ms) - len(seen)
	if dups > 1 {
		t.Errorf("%d duplicate deliveries across a drain handover, want at most 1", dups)
	}
	t.Logf("handover: %d jobs, %d duplicates", len(seen), dups)
	// The key's rate held across both shapers: never more than 22 in a second.
	for i := range ms {
		j := i
		for j > 0 && received(ms[i]).Sub(received(ms[j-1])) < time.Second {
			j--
		}
		if n := i - j + 1; n > 22 {
			t.Fatalf("%d deliveries of one key within a second through two shapers, past 20/s", n)
		}
	}
}

// Two shapers claiming one instance id would both think they hold its
// drain leases: the second is refused, naming the first.
func TestInstanceIDIsClaimedOnce(t *testing.T) {
	srv := testenv.NATS(t)
	set := testenv.Policies(t, "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n")
	first := testenv.Shaper(t, shaper.Config{Policies: set, NATSURL: srv.ClientURL(), InstanceID: "one", LeaseTTL: 3 * time.Second})
	second, err := shaper.New(shaper.Config{Policies: set, NATSURL: srv.ClientURL(), InstanceID: "one", LeaseTTL: 3 * time.Second, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = second.Run(ctx)
	var ce *shaper.ConfigError
	if !errors.As(err, &ce) || ce.Field != "InstanceID" || !strings.Contains(err.Error(), first.HTTPAddr()) {
		t.Fatalf("second shaper with the same instance id: Run = %v, want an InstanceID error naming %s", err, first.HTTPAddr())
	}
	// Once the first has stopped, the id is free again at once.
	first.Stop()
	again := testenv.Shaper(t, shaper.Config{Policies: set, NATSURL: srv.ClientURL(), InstanceID: "one", LeaseTTL: 3 * time.Second})
	again.Stop()
}

// Why a queued job waits is the answer of the shaper that delivers its
// key: asked of the other shaper, whose own sink delivers nothing, the
// job's status still says it waits for a consumer, as a full key's 429
// does.
func TestJobWaitsForAConsumerAskedOfAnyShaper(t *testing.T) {
	a, b := twoShapers(t, "policies:\n  - {name: p, outflow: 1/m, queue: 2}\n", 1500*time.Millisecond)
	waitFor(t, "one shaper draining the policy", 10*time.Second, func() bool {
		return a.Status()[0].Draining != b.Status()[0].Draining
	})
	other := a
	if a.Status()[0].Draining {
		other = b
	}
	api, err := client.New(wrap(t, other).base, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := api.Submit(ctx, "p", "k", []byte("x"))
	if err != nil || res.Outcome != client.OutcomeAccepted {
		t.Fatalf("Submit = %+v, %v", res, err)
	}
	var job client.Job
	waitFor(t, "the status, asked of the shaper that does not deliver, to say the job waits for a consumer", 10*time.Second, func() bool {
		job, err = api.Job(ctx, res.ID)
		return err == nil && strings.HasPrefix(job.Reason, drain.WaitingForConsumer)
	})
}

// A shaper stopping beside another hands its partitions over and answers
// for them until the other serves them: once Stop returns, the other
// drains every partition (and answers for it), so no producer is answered
// from a passive drainer in between. The other hears of the leave at once
// (the members' word), not at its next read of the membership: with a
// lease TTL of 30 s, reads 5 s apart, Stop returns within milliseconds
// (2.5 s allowed for a loaded machine; without the word it took 5.0 s).
func TestStopWaitsForTheNextHolders(t *testing.T) {
	a, b := twoShapers(t, "policies:\n  - {name: p, outflow: 1/s, total: 4/s, queue: 5, partitions: 4}\n", 30*time.Second)
	waitFor(t, "the partitions shared out", 10*time.Second, func() bool {
		return len(a.Status()[0].DrainingPartitions) == 2 && len(b.Status()[0].DrainingPartitions) == 2
	})
	start := time.Now()
	a.Stop()
	took := time.Since(start)
	if got := b.Status()[0].DrainingPartitions; len(got) != 4 {
		t.Errorf("the other shaper drains partitions %v as the first stops, want all 4", got)
	}
	t.Logf("Stop returned %v after it was called", took.Round(time.Millisecond))
	if took > 2500*time.Millisecond {
		t.Errorf("Stop returned %v after it was called, want the other shaper to hear of the leave at once", took)
	}
}

// twoShapers starts shapers "a" and "b" of the policy file yaml on one
// JetStream server, with lease TTL ttl.
func twoShapers(t *testing.T, yaml string, ttl time.Duration) (a, b *testenv.Running) {
	t.Helper()
	ns := testenv.NATS(t)
	set := testenv.Policies(t, yaml)
	startOne := func(id string) *testenv.Running {
		return testenv.Shaper(t, shaper.Config{Policies: set, NATSURL: ns.ClientURL(), InstanceID: id, LeaseTTL: ttl})
	}
	return startOne("a"), startOne("b")
}

// A shaper killed on another machine leaves its instance id's entry until
// a lease TTL after its last renewal. Its successor under the same id
// waits that long and starts, without a start-up step cut off and
// retried with a warning along the way.
func TestInstanceIDOfAHolderLostElsewhere(t *testing.T) {
	srv := testenv.NATS(t)
	js, err := jetstream.New(testenv.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const ttl = 3 * time.Second
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "SHAPER_LEASES", TTL: ttl, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("one"))
	lost := `{"instance":"one","host":"elsewhere","pid":1,"http":"10.0.0.9:8080","started":"2026-01-02T03:04:05Z","nonce":"x"}`
	if _, err := kv.PutString(ctx, "member."+hex.EncodeToString(sum[:8]), lost); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	start := time.Now()
	testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, "policies:\n  - {name: p, outflow: 5/s, queue: 3}\n"),
		NATSURL: srv.ClientURL(), InstanceID: "one", LeaseTTL: ttl, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Logf("ready %v after the lost holder's last renewal", time.Since(start).Round(time.Millisecond))
	if retries := strings.Count(logs.String(), "start-up: failed, retrying"); retries > 0 {
		t.Errorf("claiming the id of a holder lost elsewhere: %d start-up retries logged, want none:\n%s", retries, logs.String())
	}
}

// Shapers whose policy files set a policy otherwise answer its producers
// by different rules: each says so in GET /v1/policies, naming the
// others, until a reload gives them the same file.
func TestPolicyFilesDifferBetweenShapers(t *testing.T) {
	ns := testenv.NATS(t)
	dir := t.TempDir()
	start := func(id, yaml string) (*running, string) {
		file := filepath.Join(dir, id+".yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		set, err := policies.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		return wrap(t, testenv.Shaper(t, shaper.Config{Policies: set, PolicyFile: file, NATSURL: ns.ClientURL(), InstanceID: id, LeaseTTL: 1200 * time.Millisecond})), file
	}
	const same = "policies:\n  - {name: p, outflow: 5/s, queue: 3}\n  - {name: q, outflow: 1/s, queue: 3}\n"
	a, _ := start("a", same)
	b, bFile := start("b", strings.Replace(same, "5/s", "50/s", 1))
	differs := func(r *running, name string) []any {
		v, _ := r.get(t, "/v1/policies/"+name)["file_differs_on"].([]any)
		return v
	}
	waitFor(t, "each shaper to name the other as setting p otherwise", 10*time.Second, func() bool {
		da, db := differs(a, "p"), differs(b, "p")
		return len(da) == 1 && da[0] == "b" && len(db) == 1 && db[0] == "a"
	})
	if d := differs(a, "q"); len(d) != 0 {
		t.Errorf("q, set alike in both files: file_differs_on %v, want none", d)
	}
	if err := os.WriteFile(bFile, []byte(same), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the files to agree after the reload", 10*time.Second, func() bool {
		return len(differs(a, "p")) == 0 && len(differs(b, "p")) == 0
	})
}

// A shaper whose file drains a policy in another number of partitions
// than the shapers draining it stands by; its status says so and names
// those shapers' drainers, of their partitions, not of its own.
func TestStatusOfAShaperStandingByForAnotherLayout(t *testing.T) {
	ns := testenv.NATS(t)
	start := func(id, yaml string) *running {
		return wrap(t, testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, yaml), NATSURL: ns.ClientURL(), InstanceID: id, LeaseTTL: 1200 * time.Millisecond}))
	}
	a := start("a", "policies:\n  - {name: p, outflow: 5/s, queue: 3, partitions: 2}\n")
	waitFor(t, "a to drain both partitions", 10*time.Second, func() bool {
		d, _ := a.get(t, "/v1/policies/p")["draining_partitions"].([]any)
		return len(d) == 2
	})
	b := start("b", "policies:\n  - {name: p, outflow: 5/s, queue: 3, partitions: 4}\n")
	var got map[string]any
	waitFor(t, "b to say the policy is drained in 2 partitions by a", 10*time.Second, func() bool {
		got = b.get(t, "/v1/policies/p")
		return got["partitions_in_use"] == 2.0
	})
	if d := fmt.Sprint(got["drainers"]); d != "[a a]" || got["partitions"] != 4.0 || got["draining"] != false {
		t.Errorf("b standing by: drainers %s, partitions %v, draining %v; want [a a], 4 and false", d, got["partitions"], got["draining"])
	}
}
