package queue

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestReserveFor(t *testing.T) {
	for _, c := range []struct{ limit, want int64 }{
		{1 << 20, 256 << 10},   // the floor
		{4 << 20, 256 << 10},   // still the floor
		{64 << 20, 2 << 20},    // 1/32
		{1 << 40, 256 << 20},   // the ceiling
		{300 << 10, 150 << 10}, // never more than half
	} {
		if got := ReserveFor(c.limit); got != c.want {
			t.Errorf("ReserveFor(%d) = %d, want %d", c.limit, got, c.want)
		}
	}
}

// A Reserve counts the jobs being stored and those stored since its
// sample was asked for, refuses a job that would enter the room it keeps
// (storage full, saying why), and refuses nothing while it knows no
// limit.
func TestReserveTake(t *testing.T) {
	var nothing *Reserve
	if err := nothing.take(1 << 30); err != nil {
		t.Fatalf("nil Reserve refused: %v", err)
	}
	var r Reserve
	if err := r.take(1 << 40); err != nil {
		t.Fatalf("Reserve without a sample refused: %v", err)
	}
	r.done(1<<40, false)
	r.Sample(0, 64<<20) // keeps 2 MiB
	if err := r.take(60 << 20); err != nil {
		t.Fatalf("60 of 64 MiB refused: %v", err)
	}
	// Being stored, the first job counts: jobs stored at once count each other.
	if err := r.take(2 << 20); err != nil {
		t.Fatalf("62 of 64 MiB (up to the reserve) refused: %v", err)
	}
	err := r.take(1)
	if !errors.Is(err, ErrStorageFull) || !errors.Is(err, ErrReserve) {
		t.Fatalf("a byte into the reserve while 62 MiB are being stored: %v, want ErrStorageFull and ErrReserve", err)
	}
	if s := err.Error(); !strings.Contains(s, "holds 62.0 MiB of 64.0 MiB (with the jobs being stored), and its last 2.0 MiB are kept") {
		t.Errorf("refusal %q, want what the store holds and keeps", s)
	}
	r.done(60<<20, true) // stored: counted until the next sample
	r.done(2<<20, false) // refused by JetStream: not stored
	if used, limit, known := r.Room(); used != 60<<20 || limit != 64<<20 || !known {
		t.Errorf("Room() = %d, %d, %v, want 60 MiB stored since the sample, of 64", used, limit, known)
	}
	// A sample asked for before a job was stored, answered after: the
	// job counts, whether or not the sample saw it.
	mark := r.stored.Load()
	if err := r.take(1 << 20); err != nil {
		t.Fatal(err)
	}
	r.done(1<<20, true)
	r.sampled(mark, 10<<20, 64<<20) // the drain freed room; the sample may not hold the job
	if used, _, _ := r.Room(); used != 11<<20 {
		t.Errorf("after a sample asked for before a store: use %d, want 11 MiB", used)
	}
	r.Sample(63<<20, -1) // the limit went away (unknown)
	if err := r.take(1 << 20); err != nil {
		t.Errorf("unknown limit refused: %v", err)
	}
}

func TestStoredSize(t *testing.T) {
	m := &nats.Msg{Subject: "shaper.q.p.k", Data: make([]byte, 100), Header: nats.Header{"Shaper-Id": {"abc"}}}
	if got := storedSize(m); got != 30+12+100+9+3+4 {
		t.Errorf("storedSize = %d", got)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 4 << 20: "4.0 MiB", 3 << 29: "1.5 GiB", 1536: "1.5 KiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
