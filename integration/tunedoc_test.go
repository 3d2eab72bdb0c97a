package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTuningPageOutput: the output docs/tuning.md shows for its tune
// command is what the binary prints for it, on the trace its trace
// command makes (the same flags and seed make the same trace): the sample
// drifted from the binary once unnoticed, as the drain's pacing was
// refined. Only the replay's duration may differ.
func TestTuningPageOutput(t *testing.T) {
	needBinaries(t)
	page, err := os.ReadFile("../docs/tuning.md")
	if err != nil {
		t.Fatal(err)
	}
	var traceCmd, tuneCmd string
	for _, c := range readmeCommands(t, "../docs/tuning.md") {
		switch {
		case traceCmd == "" && strings.HasPrefix(c, "go run ./cmd/producer trace"):
			traceCmd = c
		case tuneCmd == "" && strings.HasPrefix(c, "go run ./cmd/shaper tune"):
			tuneCmd = c
		}
	}
	// The sample is the text block right after the sh block of the tune command.
	at := strings.Index(string(page), tuneCmd+"\n```\n\n```text\n")
	if traceCmd == "" || tuneCmd == "" || at < 0 {
		t.Fatalf("docs/tuning.md: found trace command %q, tune command %q; its output block found: %v", traceCmd, tuneCmd, at >= 0)
	}
	sample := string(page[at+len(tuneCmd+"\n```\n\n```text\n"):])
	sample = sample[:strings.Index(sample, "```")]

	dir := t.TempDir()
	example, err := os.ReadFile("../policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies.yaml"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(cmdline, bin string) string {
		args := strings.Fields(strings.TrimPrefix(cmdline, strings.Join(strings.Fields(cmdline)[:3], " ")))
		for i, a := range args { // relative paths: in dir
			if strings.HasSuffix(a, ".csv") || strings.HasSuffix(a, ".yaml") || strings.HasSuffix(a, ".svg") {
				args[i] = filepath.Join(dir, a)
			}
		}
		return runBin(t, 2*time.Minute, bin, args...)
	}
	run(traceCmd, bins.producer)
	got := strings.ReplaceAll(run(tuneCmd, bins.shaper), dir+string(filepath.Separator), "")
	took := regexp.MustCompile(`candidates in [0-9.]+m?s`)
	norm := func(s string) string { return took.ReplaceAllString(strings.TrimSpace(s), "candidates in T") }
	if norm(got) != norm(sample) {
		t.Errorf("docs/tuning.md shows for %q:\n%s\nthe binary prints:\n%s", tuneCmd, sample, got)
	}
}
