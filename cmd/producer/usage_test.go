package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
)

// The test binary is also the producer command, for the tests of what only
// a process shows: its exit status and what it prints where.
func TestMain(m *testing.M) { testenv.RunMain(m, "producer", main) }

// A required flag left out is said first and alone, in one line on
// stderr, with exit status 2: not after the command's whole help.
func TestRequiredFlagSaidFirst(t *testing.T) {
	t.Setenv("PRODUCER_POLICY", "") // restored after the test
	os.Unsetenv("PRODUCER_POLICY")
	cmd, stdout, stderr := testenv.Command(t, "send", "--jobs", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := testenv.ExitCode(t, cmd, 10*time.Second)
	want := "producer send: --policy is required (see producer send --help)\n"
	if code != 2 || stderr.String() != want || stdout.String() != "" {
		t.Errorf("send without --policy: exit %d, stderr %q, stdout %q; want exit 2, stderr %q and nothing else", code, stderr.String(), stdout.String(), want)
	}
}

// A bad value is named once, after the command: "producer send: --rate:
// …", not "producer send: send: --rate: …".
func TestBadValueNamedOnce(t *testing.T) {
	cmd, _, stderr := testenv.Command(t, "send", "--policy", "p", "--rate", "fast")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := testenv.ExitCode(t, cmd, 10*time.Second)
	if want := "producer send: --rate: \"fast\" is not a rate"; code != 2 || !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("send --rate fast: exit %d, stderr %q; want exit 2 and %q", code, stderr.String(), want)
	}
}
