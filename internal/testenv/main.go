package testenv

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// mainEnv, set in its environment, makes a test binary run its package's
// main instead of its tests (RunMain).
const mainEnv = "SHAPER_TEST_RUN_MAIN"

// RunMain is the TestMain of a command's package: started by Command, the
// test binary is the command, named name, running main with Command's
// arguments; otherwise it runs the tests. A test of what only the process
// shows (its signals, exit status and output) then needs no build.
func RunMain(m *testing.M, name string, main func()) {
	if os.Getenv(mainEnv) == "1" {
		os.Unsetenv(mainEnv)
		os.Args[0] = name
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Command returns the command of the package under test (see RunMain)
// with args, its stdout and stderr collected.
func Command(t testing.TB, args ...string) (cmd *exec.Cmd, stdout, stderr *Buffer) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr = new(Buffer), new(Buffer)
	cmd = exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd, stdout, stderr
}

// ExitCode waits for cmd, at most d (then it kills it and fails t), and
// returns its exit status: -1 when a signal ended it.
func ExitCode(t testing.TB, cmd *exec.Cmd, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode()
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s still running after %v", cmd, d)
		return 0
	}
}
