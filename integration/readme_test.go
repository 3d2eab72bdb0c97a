package integration

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReadmeCommands runs every command of the ```sh blocks of README.md
// and of every docs/*.md, as a user pastes them, page by page and in order,
// against the binaries of this run.
//
// Each page runs in a directory of its own holding a copy of the example
// policy file, on free ports of its own: `go run ./cmd/X` becomes the built
// X, the default addresses become those ports (in the command line, and
// through the SHAPER_*/PRODUCER_* variables the commands read by default).
// The pages assume the quick start's shaper is running: a page none of
// whose commands starts one gets one first (`shaper serve --policies
// policies.yaml`); a page that starts another stops the one before.
//
// A command that serves or follows (serve, sink without --expect or
// --duration, --watch) must still run after a few seconds; any other must
// exit 0 within a minute. `export NAME=VALUE` sets NAME for the page's
// later commands. Two kinds are not run, and the log says so: the test
// command itself (it is what runs this), and docker commands (there is no
// container engine here; cmd/shaper's tests parse-check the compose file). Blocks
// not meant to be run (output, file formats) are fenced as text, yaml, …:
// only sh blocks are commands. A bash block is a script to paste whole,
// with loops and processes in the background: the test of its page runs
// it (scaling.md's: TestScalingRecipe).
func TestReadmeCommands(t *testing.T) {
	needBinaries(t)
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"../README.md"}, pages...)
	example, err := os.ReadFile("../policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, page := range pages {
		cmds := readmeCommands(t, page)
		if i == 0 && len(cmds) < 5 {
			t.Fatalf("found %d commands in the README's sh blocks, want the quick start's at least", len(cmds))
		}
		if len(cmds) == 0 {
			continue
		}
		t.Run(filepath.Base(page), func(t *testing.T) { runPage(t, example, cmds) })
	}
}

// runPage runs the commands of one page (see TestReadmeCommands).
func runPage(t *testing.T, example []byte, cmds []string) {
	dir := t.TempDir()
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
	exports := []string{}
	var serving *exec.Cmd // the page's shaper
	var servingDone chan error
	startsShaper := false
	for _, line := range cmds {
		startsShaper = startsShaper || strings.Contains(line, " serve")
	}
	if !startsShaper {
		cmds = append([]string{"go run ./cmd/shaper serve --policies policies.yaml"}, cmds...)
		t.Logf("this page runs against the quick start's shaper: started first")
	}
	for _, line := range cmds {
		switch {
		case strings.HasPrefix(line, "go test"):
			t.Logf("skipped: %s (it is what runs this)", line)
			continue
		case isDocker(line):
			t.Logf("skipped: %s (no container engine here; cmd/shaper parse-checks the compose file)", line)
			continue
		case strings.HasPrefix(line, "export "):
			exports = append(exports, export(t, dir, line))
			continue
		}
		cmdline := replace.Replace(line)
		env := append(os.Environ(), "SHAPER_HTTP="+httpAddr, "SHAPER_NATS_LISTEN="+natsAddr, "PRODUCER_HTTP=http://"+httpAddr)
		if !strings.Contains(line, " serve") {
			env = append(env, "SHAPER_NATS_URL=nats://"+natsAddr) // shaper record's default
		}
		if strings.Contains(line, " sink") {
			env = append(env, "PRODUCER_NATS_URL=nats://"+natsAddr)
		}
		env = append(env, exports...)
		if strings.Contains(line, " serve") && serving != nil {
			_ = serving.Process.Kill() // one shaper per page: the next takes its place
			<-servingDone
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		script := cmdline
		if follows(line) {
			script = "exec " + cmdline // one command: its pid is the process
		}
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
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
				cancel()
				continue
			case <-time.After(3 * time.Second):
				t.Logf("%s: running", line)
			}
			if strings.Contains(line, " serve") {
				serving, servingDone = cmd, done
				waitFor(t, 30*time.Second, "the page's shaper to be ready", func() bool {
					return exec.Command("curl", "-fs", "http://"+httpAddr+"/readyz").Run() == nil
				})
			}
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
				}
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
// Markdown file at path, without comments and comment lines; a line ending
// in a backslash continues on the next.
func readmeCommands(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in, cont := false, ""
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
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "#") {
				continue
			}
			if c, ok := strings.CutSuffix(line, `\`); ok {
				cont += c
				continue
			}
			if line = cont + line; line != "" {
				cmds = append(cmds, line)
			}
			cont = ""
		}
	}
	return cmds
}

// follows says whether a command line runs until stopped.
func follows(line string) bool {
	return strings.Contains(line, " serve") || strings.Contains(line, "--watch") ||
		strings.Contains(line, " sink") && !strings.Contains(line, "--expect") && !strings.Contains(line, "--duration")
}

// isDocker says whether a command line runs docker (after any variable
// assignments).
func isDocker(line string) bool {
	return strings.HasPrefix(line, "docker ") || strings.Contains(line, " docker ")
}

var exportLine = regexp.MustCompile(`^export ([A-Za-z_][A-Za-z0-9_]*)=`)

// export evaluates an `export NAME=VALUE` line in dir and returns
// NAME=<its value> for the environment of the commands after it.
func export(t *testing.T, dir, line string) string {
	t.Helper()
	m := exportLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("%s: want export NAME=VALUE", line)
	}
	cmd := exec.Command("bash", "-c", line+"\nprintf %s \"$"+m[1]+"\"")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	t.Logf("%s: ok", line)
	return m[1] + "=" + string(out)
}

func lastLinesOf(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
