package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFloorSmoke runs the benchmark end to end, small (2,000 jobs over 50
// keys, paced for 2 s), and checks that its table parses and that the
// floor, the unpaced shaper and the paced shaper each have a non-zero
// throughput and CPU per delivery. The figures themselves are not judged.
func TestFloorSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nats-server and two shapers: not with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads CPU times from /proc")
	}
	bin := filepath.Join(t.TempDir(), "floor")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-jobs", "2000", "-keys", "50", "-paced-duration", "2s", "-paced-warmup", "1s", "-timeout", "3m")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatalf("floor: %v", err)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(string(out), "\n") {
		cells := strings.Split(l, "|")
		if len(cells) != 7 || !strings.HasPrefix(l, "| ") {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch what := cells[1]; {
		case strings.HasPrefix(what, "floor:") && strings.Contains(what, "acks confirmed"):
			rows["floor"] = cells
		case strings.HasPrefix(what, "shaper, unpaced"):
			rows["unpaced"] = cells
		case strings.HasPrefix(what, "shaper, paced"):
			rows["paced"] = cells
		}
	}
	for _, name := range []string{"floor", "unpaced", "paced"} {
		cells, ok := rows[name]
		if !ok {
			t.Errorf("no %s row in the table", name)
			continue
		}
		for i, col := range []string{"deliveries/s", "CPU-µs per delivery"} {
			v, err := strconv.ParseFloat(strings.ReplaceAll(cells[2+i], ",", ""), 64)
			if err != nil || v <= 0 {
				t.Errorf("%s row: %s %q, want a positive number", name, col, cells[2+i])
			}
		}
	}
	for _, target := range []string{"target: unpaced confirmed delivery", "target: paced delivery"} {
		if !strings.Contains(string(out), target) {
			t.Errorf("no line %q", target)
		}
	}
}
