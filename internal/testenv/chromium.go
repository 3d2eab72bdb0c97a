package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ChromiumInstallCommand is the command that installs the headless
// browser the browser tests drive, on Debian and Ubuntu.
const ChromiumInstallCommand = "apt-get install chromium"

// chromiumNames are the names Chromium's binary has in the distributions.
var chromiumNames = []string{"chromium", "chromium-browser"}

// Chromium returns the path of a Chromium binary for a browser test. A
// missing Chromium is installed with apt-get (Debian's chromium package,
// and a font so that pages render legibly) when the test runs as root;
// otherwise, or when the install fails, the test fails with the install
// command: a browser test is never skipped, in CI least of all.
func Chromium(t testing.TB) string {
	t.Helper()
	if p, ok := findChromium(); ok {
		return p
	}
	apt, aptErr := exec.LookPath("apt-get")
	if os.Geteuid() != 0 || aptErr != nil {
		t.Fatalf("testenv: chromium not found on PATH; install it with: %s", ChromiumInstallCommand)
	}
	t.Logf("testenv: chromium not found; installing it with apt-get (once, it takes a minute)")
	if err := aptInstall(apt, "chromium", "chromium", "fonts-dejavu-core"); err != nil {
		t.Fatalf("testenv: installing chromium failed (%v); install it with: %s", err, ChromiumInstallCommand)
	}
	p, ok := findChromium()
	if !ok {
		t.Fatalf("testenv: chromium still not on PATH after apt-get; install it with: %s", ChromiumInstallCommand)
	}
	return p
}

func findChromium() (string, bool) {
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
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
