package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// aptLock serialises apt-get runs of test binaries running in parallel.
const aptLock = "/tmp/shaper-testenv-apt.lock"

// aptBinary returns the path of the first of names on PATH. When none is,
// it installs pkgs with apt-get if the test runs as root, and says that it
// did; otherwise, or when the install fails, it fails the test with
// installCommand: a test needing the binary is never skipped.
func aptBinary(t testing.TB, names []string, installCommand string, pkgs ...string) (path string, installed bool) {
	t.Helper()
	if p, ok := lookPath(names); ok {
		return p, false
	}
	apt, aptErr := exec.LookPath("apt-get")
	if os.Geteuid() != 0 || aptErr != nil {
		t.Fatalf("testenv: %s not found on PATH; install it with: %s", names[0], installCommand)
	}
	t.Logf("testenv: %s not found; installing it with apt-get (once, it takes a minute)", names[0])
	if err := aptInstall(apt, names, pkgs...); err != nil {
		t.Fatalf("testenv: installing %s failed (%v); install it with: %s", names[0], err, installCommand)
	}
	p, ok := lookPath(names)
	if !ok {
		t.Fatalf("testenv: %s still not on PATH after apt-get; install it with: %s", names[0], installCommand)
	}
	return p, true
}

// lookPath returns the path of the first of names on PATH.
func lookPath(names []string) (string, bool) {
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// aptInstall runs apt-get update and apt-get install of pkgs under an
// exclusive file lock, so that parallel test binaries install once and do
// not collide; it does nothing when one of names is on PATH by then
// (installed by another test binary while this one waited).
func aptInstall(apt string, names []string, pkgs ...string) error {
	f, err := os.OpenFile(aptLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", aptLock, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if _, ok := lookPath(names); ok {
		return nil
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	install := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	for _, args := range [][]string{{"update"}, install} {
		cmd := exec.Command(apt, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %v: %s", args[0], err, lastLines(out, 5))
		}
	}
	return nil
}

func lastLines(b []byte, n int) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, []byte("\n"))
}
