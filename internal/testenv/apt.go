package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// aptLock serialises apt-get runs of test binaries running in parallel.
const aptLock = "/tmp/shaper-testenv-apt.lock"

// aptInstall runs apt-get update and apt-get install of pkgs under an
// exclusive file lock, so that parallel test binaries install once and do
// not collide; it does nothing when bin is on PATH by then (installed by
// another test binary while this one waited).
func aptInstall(apt, bin string, pkgs ...string) error {
	f, err := os.OpenFile(aptLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", aptLock, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if _, err := exec.LookPath(bin); err == nil {
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
