package shaper_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

// Recording: nothing is published while nobody records; once asked, every
// submission, over HTTP or NATS, comes as a row with its key, size, time
// and outcome.
func TestRecord(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, "policies:\n  - {name: rec, outflow: 1/h, queue: 2}\n  - {name: other, outflow: 1/h, queue: 2}\n")})
	nc, err := nats.Connect(s.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	api, err := client.New("http://"+s.HTTPAddr(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := client.NewNATS(nc, client.NATSConfig{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Nobody records: no row is published.
	rows, err := nc.SubscribeSync(client.RecordRows(client.DefaultRecordSubject, "rec"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Submit(ctx, "rec", "before", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if m, err := rows.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("a row was published while nobody recorded: %q", m.Data)
	}

	var (
		mu     sync.Mutex
		got    []traffic.Record
		first  = make(chan struct{})
		once   sync.Once
		stats  client.RecordStats
		recErr error
	)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		stats, recErr = sub.Record(rctx, "rec", func(b client.RecordBatch) {
			r := traffic.NewRowReader(bytes.NewReader(b.Rows))
			for {
				rec, err := r.Read()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Errorf("a batch of %s: %v", b.Instance, err)
					return
				}
				mu.Lock()
				got = append(got, rec)
				mu.Unlock()
			}
			once.Do(func() { close(first) })
		})
	}()
	// Submit to "probe" until the shaper records; then the jobs to check.
	for probing := true; probing; {
		if _, err := api.Submit(ctx, "rec", "probe", nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-first:
			probing = false
		case <-done:
			t.Fatalf("Record returned before recording: %v", recErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := api.Submit(ctx, "rec", "h", []byte("12345")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Submit(ctx, "rec", "n", []byte("123")); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the third finds the queue of 2 full
		if _, err := sub.Submit(ctx, "rec", "full", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.Submit(ctx, "other", "o", nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	<-done
	if recErr != nil {
		t.Fatalf("Record = %v", recErr)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"h 5 accepted", "n 3 accepted", "full 0 accepted", "full 0 accepted", "full 0 rejected"}
	var rowsGot []string
	for _, r := range got {
		if when := time.Unix(0, int64(r.At)); when.Before(start) || when.After(time.Now()) {
			t.Errorf("row %+v at %v: not during the test", r, when)
		}
		if r.Key != "probe" {
			rowsGot = append(rowsGot, fmt.Sprintf("%s %d %s", r.Key, r.Size, r.Outcome))
		}
	}
	if !slices.Equal(rowsGot, want) {
		t.Errorf("rows %q, want %q", rowsGot, want)
	}
	if stats.Shapers != 1 || stats.Lost != 0 || stats.Batches == 0 {
		t.Errorf("Record's stats %+v, want 1 shaper, nothing lost", stats)
	}

	// An unknown policy, and a NATS server without a shaper.
	if _, err := sub.Record(ctx, "nope", func(client.RecordBatch) {}); !errors.Is(err, client.ErrUnknownPolicy) {
		t.Errorf("Record(nope) = %v, want ErrUnknownPolicy", err)
	}
	bare := testenv.NATS(t)
	nc2, err := nats.Connect(bare.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	alone, _ := client.NewNATS(nc2, client.NATSConfig{Timeout: 300 * time.Millisecond})
	if _, err := alone.Record(ctx, "rec", func(client.RecordBatch) {}); !errors.Is(err, client.ErrNoShaper) {
		t.Errorf("Record without a shaper = %v, want ErrNoShaper", err)
	}
}

// A recording request says how long it records: at most a minute, however
// long it asks (1e15 ms overflowed a duration), and a bad one says what a
// good one is.
func TestRecordRequestBounds(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, "policies:\n  - {name: rec, outflow: 1/h, queue: 2}\n")})
	nc, err := nats.Connect(s.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for body, want := range map[string]string{
		`{"for_ms": 600000}`:           `"for_ms":60000`,
		`{"for_ms": 1000000000000000}`: `"for_ms":60000`,
		`{"for_ms": 1500}`:             `"for_ms":1500`,
		`{"for_ms": 1e15}`:             `a whole number of milliseconds`,
		`{"for_ms": 0}`:                `a whole number of milliseconds`,
	} {
		m, err := nc.Request("shaper.record.rec", []byte(body), 5*time.Second)
		if err != nil || !bytes.Contains(m.Data, []byte(want)) {
			t.Errorf("record request %s = %v, %v; want %s", body, m, err, want)
		}
	}
}
