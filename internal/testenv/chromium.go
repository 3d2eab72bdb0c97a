package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// ChromiumInstallCommand is the command that installs the headless
// browser the browser tests drive, on Debian and Ubuntu.
const ChromiumInstallCommand = "apt-get install chromium"

// Chromium returns the path of a Chromium binary for a browser test (named
// chromium or chromium-browser, as the distributions have it). A missing
// Chromium is installed with apt-get (Debian's chromium package, and a font
// so that pages render legibly) when the test runs as root; otherwise, or
// when the install fails, the test fails with the install command: a
// browser test is never skipped, in CI least of all.
func Chromium(t testing.TB) string {
	t.Helper()
	p, _ := aptBinary(t, []string{"chromium", "chromium-browser"}, ChromiumInstallCommand, "chromium", "fonts-dejavu-core")
	return p
}

// Artifacts returns the directory where tests keep files for a person to
// look at (screenshots): $SHAPER_ARTIFACTS when set, else shaper-artifacts
// in the temporary directory. It is created when missing and outlives the
// test; files in it are replaced by the next run.
func Artifacts(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SHAPER_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "shaper-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("testenv: artifacts: %v", err)
	}
	return dir
}
