package integration

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReadmeCommands runs every command of the README's sh blocks, as a
// user pastes them, in order, against the binaries of this run: `go run
// ./cmd/X` becomes the built X, the default addresses become free ports
// (through the SHAPER_*/PRODUCER_* variables, or in a URL), and the working
// directory is a copy of the example policy file. A command that serves or
// follows (serve, sink without --expect or --duration, --watch) must still
// run after a few seconds; any other must exit 0 within a minute. The test
// command itself is skipped: it is what runs this.
func TestReadmeCommands(t *testing.T) {
	needBinaries(t)
	cmds := readmeCommands(t, "../README.md")
	if len(cmds) < 5 {
		t.Fatalf("found %d commands in the README's sh blocks, want the quick start's at least", len(cmds))
	}
	dir := t.TempDir()
	example, err := os.ReadFile("../policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies.yaml"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	httpAddr, natsAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	replace := strings.NewReplacer(
		"go run ./cmd/shaper", bins.shaper,
		"go run ./cmd/producer", bins.producer,
		"localhost:8080", httpAddr,
		"127.0.0.1:8080", httpAddr,
		"localhost:4222", natsAddr,
		"127.0.0.1:4222", natsAddr,
	)
	for _, line := range cmds {
		if strings.HasPrefix(line, "go test") {
			continue
		}
		cmdline := replace.Replace(line)
		env := append(os.Environ(),
			"SHAPER_HTTP="+httpAddr, "SHAPER_NATS_LISTEN="+natsAddr, "SHAPER_DATA="+filepath.Join(dir, "data"),
			"PRODUCER_HTTP=http://"+httpAddr)
		if strings.Contains(line, " sink") {
			env = append(env, "PRODUCER_NATS_URL=nats://"+natsAddr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", "exec "+cmdline) // one command: its pid is the process
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = procAttr()
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatalf("%s: %v", line, err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if follows(line) {
			select {
			case err := <-done:
				t.Errorf("%s\nexited (%v) but should keep running:\n%s", line, err, out.String())
			case <-time.After(3 * time.Second):
				t.Logf("%s: running", line)
			}
			if strings.Contains(line, " serve") {
				waitFor(t, 30*time.Second, "the README's shaper to be ready", func() bool {
					return exec.Command("curl", "-fs", "http://"+httpAddr+"/readyz").Run() == nil
				})
			}
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-done
				cancel()
			})
			continue
		}
		err := <-done
		cancel()
		if err != nil {
			t.Errorf("%s\nfailed: %v\n%s", line, err, out.String())
			continue
		}
		t.Logf("%s: ok\n%s", line, lastLinesOf(out.String(), 4))
	}
}

// readmeCommands returns the command lines of the ```sh blocks of the
// Markdown file at path, without comments and comment lines.
func readmeCommands(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in:
			if i := strings.Index(line, " # "); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				cmds = append(cmds, line)
			}
		}
	}
	return cmds
}

// follows says whether a command line runs until stopped.
func follows(line string) bool {
	return strings.Contains(line, " serve") || strings.Contains(line, "--watch") ||
		strings.Contains(line, " sink") && !strings.Contains(line, "--expect") && !strings.Contains(line, "--duration")
}

func lastLinesOf(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
