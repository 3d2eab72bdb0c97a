package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// There is no container engine here: the tests read the Dockerfile as
// docker build would, and check what it names against the repository and
// the commands.

// instruction is one Dockerfile instruction, its continuation lines joined.
type instruction struct {
	cmd, args string
	line      int
}

// stage is a build stage: its FROM image and name, and its instructions.
type stage struct {
	image, name string
	body        []instruction
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.body {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func (s stage) last(cmd string) (instruction, bool) {
	all := s.all(cmd)
	if len(all) == 0 {
		return instruction{}, false
	}
	return all[len(all)-1], true
}

func readDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if body, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args), start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("%s:%d: %s before FROM", path, in.line, in.cmd)
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	return stages
}

// execForm reads an instruction's JSON array form (["/bin/x", "arg"]):
// the only form that runs without a shell in the image.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(in.args), &argv); err != nil || len(argv) == 0 {
		t.Errorf("Dockerfile:%d: %s %s: want the exec form [\"binary\", \"arg\", …]: the final image has no shell", in.line, in.cmd, in.args)
	}
	return argv
}

// checkArgs checks that args run a command of the shaper CLI with flags
// that command has, and returns the command.
func checkArgs(t *testing.T, where string, args []string) *cli.Command {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no command", where)
		return nil
	}
	cmd := newApp(nil, nil).Command(args[0])
	if cmd == nil {
		t.Errorf("%s: shaper has no command %q", where, args[0])
		return nil
	}
	flags := map[string]bool{}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			flags["--"+n], flags["-"+n] = true, true
		}
	}
	for _, a := range args[1:] {
		if f, _, _ := strings.Cut(a, "="); strings.HasPrefix(f, "-") && !flags[f] {
			t.Errorf("%s: shaper %s has no flag %s", where, cmd.Name, f)
		}
	}
	return cmd
}

// envVarsOf returns the environment variables the flags of cmd read.
func envVarsOf(cmd *cli.Command) map[string]bool {
	envs := map[string]bool{}
	for _, f := range cmd.Flags {
		if e, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, v := range e.GetEnvVars() {
				envs[v] = true
			}
		}
	}
	return envs
}

var goBuildPackage = regexp.MustCompile(`\./cmd/([a-z0-9_-]+)`)

// The Dockerfile builds static binaries of commands that exist, with the
// Go of go.mod, into a small final image that runs them as a non-root user,
// with a health check and an entry point the shaper CLI accepts.
func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t, "../../Dockerfile")
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a builder and a final image", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if !strings.HasPrefix(build.image, "golang:"+string(goVersion[1])) || build.name == "" {
		t.Errorf("builder stage FROM %s AS %q, want a named golang:%s image (go.mod's)", build.image, build.name, goVersion[1])
	}
	if !strings.Contains(final.image, "distroless") && !strings.Contains(final.image, "alpine") && final.image != "scratch" {
		t.Errorf("final stage FROM %s, want a small base (distroless, alpine or scratch)", final.image)
	}

	// The binaries: built static from ./cmd/<name> packages of main.
	var built []string
	for _, run := range build.all("RUN") {
		if !strings.Contains(run.args, "go build") {
			continue
		}
		if !strings.Contains(run.args, "CGO_ENABLED=0") {
			t.Errorf("Dockerfile:%d: go build without CGO_ENABLED=0: the binary would not be static", run.line)
		}
		for _, m := range goBuildPackage.FindAllStringSubmatch(run.args, -1) {
			built = append(built, m[1])
			src, err := os.ReadFile(filepath.Join("../..", "cmd", m[1], "main.go"))
			if err != nil || !strings.Contains(string(src), "package main") {
				t.Errorf("Dockerfile builds ./cmd/%s, which is no command of the repository: %v", m[1], err)
			}
		}
	}
	if !slices.Contains(built, "shaper") || !slices.Contains(built, "producer") {
		t.Errorf("Dockerfile builds %v, want shaper and producer", built)
	}
	installed := map[string]bool{} // path in the final image → built binary
	for _, cp := range final.all("COPY") {
		f := strings.Fields(cp.args)
		if !slices.Contains(f, "--from="+build.name) {
			// From the build context: it must be there and not ignored.
			for _, src := range f[:len(f)-1] {
				if !strings.HasPrefix(src, "--") {
					if _, err := os.Stat(filepath.Join("../..", src)); err != nil || dockerIgnored(t, src) {
						t.Errorf("Dockerfile:%d: COPY %s: missing from the repository or left out by .dockerignore (%v)", cp.line, src, err)
					}
				}
			}
			continue
		}
		dest := f[len(f)-1]
		for _, src := range f[:len(f)-1] {
			if name := filepath.Base(src); slices.Contains(built, name) {
				installed[filepath.Join(dest, name)] = true
			}
		}
	}
	for _, b := range built {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(installed)), func(p string) bool { return filepath.Base(p) == b }) {
			t.Errorf("the final image lacks the %s binary the builder makes", b)
		}
	}

	// A non-root user.
	if u, ok := final.last("USER"); !ok {
		t.Error("final stage has no USER: it would run as root")
	} else if user, _, _ := strings.Cut(u.args, ":"); user == "root" || user == "0" {
		t.Errorf("Dockerfile:%d: USER %s, want a non-root user", u.line, u.args)
	}

	// The entry point and its default command: shaper serve with flags and
	// SHAPER_* variables that serve has.
	ep, ok := final.last("ENTRYPOINT")
	if !ok {
		t.Fatal("final stage has no ENTRYPOINT")
	}
	argv := execForm(t, ep)
	if len(argv) == 0 || !installed[argv[0]] || filepath.Base(argv[0]) != "shaper" {
		t.Errorf("ENTRYPOINT %v, want the shaper binary the image installs (%v)", argv, installed)
	}
	cmd, ok := final.last("CMD")
	if !ok {
		t.Fatal("final stage has no CMD")
	}
	serve := checkArgs(t, "Dockerfile CMD", append(argv[1:], execForm(t, cmd)...))
	if serve == nil || serve.Name != "serve" {
		t.Fatalf("the image's default command runs %v, want shaper serve", serve)
	}
	envs, env := envVarsOf(serve), map[string]string{}
	for _, e := range final.all("ENV") {
		for _, kv := range strings.Fields(e.args) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
			if strings.HasPrefix(k, "SHAPER_") && !envs[k] {
				t.Errorf("Dockerfile:%d: ENV %s: shaper serve reads no such variable", e.line, k)
			}
		}
	}
	_, port, _ := strings.Cut(env["SHAPER_HTTP"], ":")
	if expose, ok := final.last("EXPOSE"); !ok || port == "" || !slices.Contains(strings.Fields(expose.args), port) {
		t.Errorf("the image serves on SHAPER_HTTP %q: want EXPOSE of its port (EXPOSE %s)", env["SHAPER_HTTP"], expose.args)
	}

	// The health check runs without a shell: shaper health.
	hc, ok := final.last("HEALTHCHECK")
	if !ok {
		t.Fatal("final stage has no HEALTHCHECK")
	}
	_, check, ok := strings.Cut(hc.args, "CMD ")
	if !ok {
		t.Fatalf("Dockerfile:%d: HEALTHCHECK %s: want HEALTHCHECK [options] CMD [\"…\"]", hc.line, hc.args)
	}
	hargv := execForm(t, instruction{"HEALTHCHECK CMD", strings.TrimSpace(check), hc.line})
	if len(hargv) == 0 || !installed[hargv[0]] {
		t.Errorf("HEALTHCHECK runs %v, want a binary the image installs", hargv)
	} else if filepath.Base(hargv[0]) == "shaper" {
		checkArgs(t, "Dockerfile HEALTHCHECK", hargv[1:])
	}
}
