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

// A Reserve takes what is stored until the next sample, refuses a job
// that would enter the room it keeps (storage full, saying why), and
// refuses nothing while it knows no limit.
func TestReserveTake(t *testing.T) {
	var nothing *Reserve
	if err := nothing.take(1 << 30); err != nil {
		t.Fatalf("nil Reserve refused: %v", err)
	}
	var r Reserve
	if err := r.take(1 << 40); err != nil {
		t.Fatalf("Reserve without a sample refused: %v", err)
	}
	r.Sample(0, 64<<20) // keeps 2 MiB
	if err := r.take(60 << 20); err != nil {
		t.Fatalf("60 of 64 MiB refused: %v", err)
	}
	if err := r.take(2 << 20); err != nil {
		t.Fatalf("62 of 64 MiB (up to the reserve) refused: %v", err)
	}
	err := r.take(1)
	if !errors.Is(err, ErrStorageFull) || !errors.Is(err, ErrReserve) {
		t.Fatalf("a byte into the reserve: %v, want ErrStorageFull and ErrReserve", err)
	}
	if s := err.Error(); !strings.Contains(s, "holds 62.0 MiB of 64.0 MiB, and its last 2.0 MiB are kept") {
		t.Errorf("refusal %q, want what the store holds and keeps", s)
	}
	if used, limit, known := r.Room(); used != 62<<20 || limit != 64<<20 || !known {
		t.Errorf("Room() = %d, %d, %v after a refusal, want the refused job not counted", used, limit, known)
	}
	r.Sample(10<<20, 64<<20) // the drain freed room
	if err := r.take(1 << 20); err != nil {
		t.Errorf("after a sample with room: %v", err)
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
