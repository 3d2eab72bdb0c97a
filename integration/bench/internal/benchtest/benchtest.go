// Package benchtest is the scaffolding of the benchmarks' smoke tests: run
// a benchmark program end to end and read the table it prints.
package benchtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Smoke builds the benchmark program in the working directory (a test's:
// its package's), runs it with args, bounded by within, logs its stdout
// and stderr and returns its stdout; it fails the test if the run fails.
// It skips the test with -short (the program runs servers, what runs
// says) and off Linux (it reads /proc).
func Smoke(t *testing.T, runs string, within time.Duration, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("runs %s: not with -short", runs)
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads CPU times and memory from /proc")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(wd)
	bin := filepath.Join(t.TempDir(), name)
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return string(out)
}

// Table returns the rows of the Markdown table in out, each a map from its
// header's column names to its cells.
func Table(out string) []map[string]string {
	var header []string
	var rows []map[string]string
	for l := range strings.Lines(out) {
		if !strings.HasPrefix(l, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| \n"), " | ")
		if header == nil {
			header = cells
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue // the line under the header
		}
		row := map[string]string{}
		for i, c := range cells {
			if i < len(header) {
				row[header[i]] = c
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// Positive returns the number a cell starts with (its thousands may be
// separated by commas) and whether it is one above 0.
func Positive(cell string) (float64, bool) {
	f := strings.Fields(cell)
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(f[0], ",", ""), 64)
	return v, err == nil && v > 0
}
