package admission

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// While JetStream elects a leader every submission fails: one line a
// second, saying how many were not logged (a tour counted 236 in 7 s).
func TestFailuresLoggedOnceASecond(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var f failures
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 50 {
		f.log(log, errors.New("nats: timeout"), t0.Add(time.Duration(i)*10*time.Millisecond))
	}
	f.log(log, errors.New("nats: timeout"), t0.Add(time.Second))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "not_logged") || !strings.Contains(lines[1], "not_logged_since_last=49") {
		t.Errorf("51 failures over a second logged as:\n%s\nwant 2 lines, the second saying 49 were not logged", buf.String())
	}
}
