package benchkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NewFlagSet returns the flag set of the benchmark
// ./integration/bench/<name>, whose usage says about after the command.
func NewFlagSet(name, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./integration/bench/%s [flags]\n\n%s\n\n", name, about)
		fs.PrintDefaults()
	}
	return fs
}

// Common is the flags every benchmark takes.
type Common struct {
	Timeout   time.Duration
	ShaperBin string
	Keep      bool
}

// AddFlags adds -timeout, -shaper-bin and -keep to fs; builds says which
// builds the timeout bounds too.
func (c *Common) AddFlags(fs *flag.FlagSet, builds string) {
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "bound on the whole run, "+builds+" included")
	fs.StringVar(&c.ShaperBin, "shaper-bin", "", "a shaper binary to measure instead of building ./cmd/shaper")
	fs.BoolVar(&c.Keep, "keep", false, "keep the temporary directory (logs, stores) and say where it is")
}

// Env is what a benchmark's run is given: its temporary directory, the
// group of its children and its progress log (on stderr).
type Env struct {
	Dir   string
	Group *Group
	Logf  func(format string, a ...any)
}

// Main runs the benchmark name once its flags are parsed: it exits 2 if
// check fails, else it runs body with a context that SIGINT, SIGTERM and
// -timeout end, in a temporary directory of its own whose children are
// killed and which is removed after (kept with -keep), and exits 1 if that
// fails. The errors go to stderr after "name:".
func Main(name string, c *Common, check func() error, body func(ctx context.Context, env Env) error) {
	if err := check(); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, name, c, os.Stderr, body); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		stop()
		os.Exit(1)
	}
}

// run runs body within c.Timeout, in a temporary directory
// "shaper-<name>-…" that it removes after (or, with c.Keep, names on
// errw), every child in the group killed first. An error that comes once
// the context ended says why it ended (past -timeout, or a signal).
func run(ctx context.Context, name string, c *Common, errw io.Writer, body func(ctx context.Context, env Env) error) (err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, c.Timeout, fmt.Errorf("past -timeout %v", c.Timeout))
	defer cancel()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
		}
	}()
	dir, err := os.MkdirTemp("", "shaper-"+name+"-")
	if err != nil {
		return err
	}
	g := NewGroup(dir)
	defer func() {
		g.KillAll()
		if c.Keep {
			fmt.Fprintf(errw, "kept %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	return body(ctx, Env{Dir: dir, Group: g, Logf: func(format string, a ...any) {
		fmt.Fprintf(errw, name+": "+format+"\n", a...)
	}})
}

// Target is a binary a benchmark runs: *Bin when that names one (a flag's),
// else Pkg built into Out in the run's directory.
type Target struct {
	Bin *string
	Pkg string // as go build names it in the module's root
	Out string
}

// Build builds the targets whose Bin is empty, from the module that holds
// the working directory, into dir, and sets their Bin.
func Build(ctx context.Context, dir string, targets ...Target) error {
	var root string
	for _, t := range targets {
		if *t.Bin != "" {
			continue
		}
		if root == "" {
			gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
			if err != nil {
				return fmt.Errorf("go env GOMOD: %w", err)
			}
			mod := strings.TrimSpace(string(gomod))
			if mod == "" || mod == os.DevNull {
				return errors.New("run it inside the shaper module (go env GOMOD is empty)")
			}
			root = filepath.Dir(mod)
		}
		bin := filepath.Join(dir, t.Out)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, t.Pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", t.Pkg, err, b)
		}
		*t.Bin = bin
	}
	return nil
}

// Phase bounds one wait on a child handling n jobs: long enough for a slow
// machine, short enough to fail well within -timeout.
func Phase(n int) time.Duration { return time.Minute + time.Duration(n)*time.Millisecond }
