package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

func TestRecordCommand(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, "policies:\n  - {name: orders, outflow: 1/h, queue: 3}\n")})
	api := newAPI(t, s.HTTPAddr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			api.Submit(ctx, "orders", []string{"a", "b, c"}[i%2], []byte("job"))
			time.Sleep(20 * time.Millisecond)
		}
	}()
	out := filepath.Join(t.TempDir(), "trace.csv")
	_, stderr, err := runCLI(t, "record", "--policy", "orders", "--duration", "2s", "--nats-url", s.NATSURL(), "--out", out)
	cancel()
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "of policy orders from 1 shaper over 2s") || !strings.Contains(stderr, "0 lost") {
		t.Errorf("record's summary: %q", stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := traffic.NewReader(f)
	counts := map[string]int{}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.At < 0 || rec.At > 3*time.Second || rec.Size != 3 {
			t.Errorf("row %+v: want size 3, within the 2 s recorded", rec)
		}
		counts[rec.Key+" "+rec.Outcome.String()]++
	}
	// Each key holds 3 (at 1/h nothing drains): the rest is rejected.
	if counts["a accepted"] > 3 || counts["b, c accepted"] > 3 || counts["a rejected"] < 20 || counts["b, c rejected"] < 20 {
		t.Errorf("rows by key and outcome: %v; want at most 3 accepted per key, the rest rejected", counts)
	}
	if c := r.Comments(); len(c) != 1 || !strings.Contains(c[0], "shaper trace of policy orders, recorded by shaper record from") {
		t.Errorf("comments %q", c)
	}

	if _, _, err := runCLI(t, "record", "--policy", "nope", "--duration", "1s", "--nats-url", s.NATSURL(), "--out", out); exitCode(err) != 2 || !strings.HasPrefix(err.Error(), "shaper record: --policy: ") || !strings.Contains(err.Error(), "unknown policy") {
		t.Errorf("record --policy nope: %v (exit %d), want unknown policy, exit 2", err, exitCode(err))
	}
}
