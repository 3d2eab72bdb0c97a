package integration

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// CI shows only the end of a run's output, and a failed test's processes
// can print thousands of lines after its error. So a failed test logs
// only the last lines of each process, keeps the whole output in a file,
// and the package's last lines name the tests that failed and where
// their processes' output is.
var failures struct {
	mu    sync.Mutex
	tests []string
	dir   string // made at the first failure, kept after the run
}

// tailLines is how many of a process's last lines a failed test logs.
const tailLines = 3

// noteFailure records t's name, at its end, when t failed.
func noteFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		failures.mu.Lock()
		defer failures.mu.Unlock()
		failures.tests = append(failures.tests, t.Name())
	})
}

// logOutput logs the end of the output out of t's process name and keeps
// the whole of it in a file.
func logOutput(t *testing.T, name, state, out string) {
	where, err := keepOutput(t.Name(), name, out)
	if err != nil {
		where = "no file (" + err.Error() + ")"
	}
	if strings.TrimSpace(out) == "" {
		t.Logf("--- %s (%s) printed nothing", name, state)
		return
	}
	t.Logf("--- output of %s (%s) in %s; its last lines:\n%s", name, state, where, lastLines(out, tailLines))
}

// keepOutput writes out to a file named after test and process in the
// failures' directory and returns the file's path.
func keepOutput(test, process, out string) (string, error) {
	failures.mu.Lock()
	defer failures.mu.Unlock()
	if failures.dir == "" {
		dir, err := os.MkdirTemp("", "shaper-integration-failed-")
		if err != nil {
			return "", err
		}
		failures.dir = dir
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(test + "." + process + ".log")
	path := filepath.Join(failures.dir, name)
	return path, os.WriteFile(path, []byte(out), 0o644)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// reportFailures names the failed tests, last, on w.
func reportFailures(w io.Writer) {
	failures.mu.Lock()
	defer failures.mu.Unlock()
	if len(failures.tests) == 0 {
		return
	}
	fmt.Fprintf(w, "integration: %d failed: %s\n", len(failures.tests), strings.Join(failures.tests, ", "))
	if failures.dir != "" {
		fmt.Fprintf(w, "integration: the whole output of their processes is in %s\n", failures.dir)
	}
}

func TestLastLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\nd\n", 3, "b\nc\nd"},
		{"a\nb", 3, "a\nb"},
		{"", 3, ""},
		{"a\nb\nc", 1, "c"},
	} {
		if got := lastLines(c.in, c.n); got != c.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
