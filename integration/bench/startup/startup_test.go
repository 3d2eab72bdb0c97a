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

// TestStartupSmoke runs the benchmark end to end, small (one job on each of
// 2,000 keys, a baseline of 200), and checks that its table parses: both
// rows, every time positive and in order (the first delivery before the
// 1,000th, the N/10th, the N/2th and the last; /readyz may answer after
// deliveries started), every job delivered without a duplicate, the
// memory figures positive. The figures themselves are not judged.
func TestStartupSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four shapers: not with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads CPU times and memory from /proc")
	}
	bin := filepath.Join(t.TempDir(), "startup")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-keys", "2000", "-baseline", "200", "-timeout", "90s")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatalf("startup: %v", err)
	}
	var header []string
	rows := map[string]map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if header == nil {
			header = cells
			continue
		}
		row := map[string]string{}
		for i, c := range cells {
			if i < len(header) {
				row[header[i]] = c
			}
		}
		rows[cells[0]] = row
	}
	for _, keys := range []string{"200", "2,000"} {
		row, ok := rows[keys]
		if !ok {
			t.Errorf("no row for %s keys in the table", keys)
			continue
		}
		num := func(col string) float64 {
			f := strings.Fields(row[col])
			if len(f) == 0 {
				t.Errorf("%s keys: no %q", keys, col)
				return 0
			}
			v, err := strconv.ParseFloat(strings.ReplaceAll(f[0], ",", ""), 64)
			if err != nil || v <= 0 {
				t.Errorf("%s keys: %s %q, want a positive number", keys, col, row[col])
			}
			return v
		}
		num("/readyz 200")
		first, thousand, all := num("first delivery"), num("1,000 deliveries"), num("all N delivered")
		tenth, half := num("N/10 delivered"), num("N/2 delivered")
		if !(first <= thousand && first <= tenth && tenth <= half && half <= all && thousand <= all) {
			t.Errorf("%s keys: first delivery %v s, 1,000th %v s, N/10th %v s, N/2th %v s, last %v s: out of order", keys, first, thousand, tenth, half, all)
		}
		if strings.Contains(row["all N delivered"], "duplicate") {
			t.Errorf("%s keys: %s", keys, row["all N delivered"])
		}
		for _, col := range []string{"filled at", "RSS at /readyz", "RSS at 1,000", "peak RSS (VmHWM at the end)"} {
			num(col)
		}
	}
	if !strings.Contains(string(out), "growth 200 → 2,000 keys") {
		t.Error("no growth line")
	}
}
