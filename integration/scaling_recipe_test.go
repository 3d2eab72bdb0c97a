package integration

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestScalingRecipe runs the script of docs/scaling.md's "Trying it on one
// machine" as a user pastes it (three JetStream nodes and three shapers
// started by bash in the background), with this run's binaries in place of
// its go build lines and three free ports in place of each of its port
// ranges: every shaper must come up and drain some of the policy's
// partitions. Everything it started is killed at the end (its process
// group).
func TestScalingRecipe(t *testing.T) {
	needBinaries(t)
	page, err := os.ReadFile("../docs/scaling.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "## Trying it on one machine")
	_, script, ok2 := strings.Cut(section, "```bash\n")
	script, _, ok3 := strings.Cut(script, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/scaling.md: no bash block under \"## Trying it on one machine\"")
	}
	script, check, ok := strings.Cut(script, "sleep 10; ")
	if !ok {
		t.Fatal("docs/scaling.md's script does not end in `sleep 10; bin/shaper status …`")
	}
	dir := t.TempDir()
	// Each of the script's ranges (422$i, 622$i, 808$i for i in 1 2 3)
	// becomes a prefix whose ports 1 to 3 are free.
	ports := strings.NewReplacer("422", freeRange(t), "622", freeRange(t), "808", freeRange(t)) // in one pass
	script, check = ports.Replace(script), ports.Replace(check)
	script = strings.NewReplacer(
		"go build -o bin/shaper ./cmd/shaper", "mkdir -p bin && cp "+bins.shaper+" bin/shaper",
		"go build -o bin/nats-server github.com/nats-io/nats-server/v2", "cp "+bins.natsServer+" bin/nats-server",
	).Replace(script)
	cmd := exec.Command("bash", "-euc", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if err != nil {
		t.Fatalf("the script: %v\n%s", err, out)
	}
	status := strings.Fields(strings.TrimSpace(strings.SplitN(check, "#", 2)[0]))
	if len(status) < 2 || status[0] != "bin/shaper" {
		t.Fatalf("the script's check %q is not a bin/shaper command", check)
	}
	var said []byte
	waitFor(t, 90*time.Second, "the three shapers draining wide's partitions", func() bool {
		c := exec.Command(filepath.Join(dir, "bin/shaper"), status[1:]...)
		c.Dir = dir
		said, _ = c.CombinedOutput()
		s := string(said)
		return strings.Contains(s, "drainers of wide:") && strings.Contains(s, "s1 (partitions") && strings.Contains(s, "s2 (partitions") && strings.Contains(s, "s3 (partitions")
	})
	t.Logf("%s", said)
}

// freeRange returns a prefix P such that ports P1, P2 and P3 are free.
func freeRange(t *testing.T) string {
	t.Helper()
	for range 200 {
		p := strconv.Itoa(2000 + rand.IntN(4000)) // ports 20001 to 59993
		free := true
		for i := 1; i <= 3 && free; i++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%s%d", p, i))
			if err != nil {
				free = false
				continue
			}
			ln.Close()
		}
		if free {
			return p
		}
	}
	t.Fatal("no three free ports in a row")
	return ""
}
