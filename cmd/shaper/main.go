// Command shaper runs the shaper service and its operator commands.
//
//	shaper serve --policies policies.yaml             # embedded JetStream in ./shaper-data
//	shaper serve --policies p.yaml --nats-url nats://n1:4222,nats://n2:4222
//	shaper policies check policies.yaml
//	shaper status --http 127.0.0.1:8080
//
// Every flag of serve, and the operator commands' connection flags, can also be
// set by an environment variable SHAPER_<FLAG>, for
// example SHAPER_POLICIES or SHAPER_NATS_URL.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go stopOnSignal(sig, cancel, os.Stderr, commandOf(os.Args) == "serve", os.Exit)
	err := run(ctx, os.Args)
	if err != nil {
		code := cmdline.ExitCode(err)
		// Said once, with the program's name once.
		if msg := err.Error(); msg != "" {
			if !strings.HasPrefix(msg, "shaper") && !strings.HasPrefix(msg, "usage:") {
				msg = "shaper: " + msg
			}
			fmt.Fprintln(os.Stderr, msg)
		}
		os.Exit(code)
	}
}

// stopOnSignal cancels the command at the first signal from sig and exits
// (130) at the second. serve stops gracefully, finishing its deliveries in
// flight, and says so on w; the other commands (status --watch, record)
// end quietly: an interrupt is how they are stopped, and they exit 0.
func stopOnSignal(sig <-chan os.Signal, cancel context.CancelFunc, w io.Writer, serving bool, exit func(int)) {
	s := <-sig
	cancel()
	if serving {
		fmt.Fprintf(w, "shaper: %v: stopping gracefully (again to force)\n", s)
	}
	s = <-sig
	if serving {
		fmt.Fprintf(w, "shaper: %v again: exiting at once; deliveries in flight are made again after a restart\n", s)
	}
	exit(130)
}

// commandOf returns the command args (args[0] is the program) run: the
// first argument that is not a flag.
func commandOf(args []string) string {
	for _, a := range args[min(len(args), 1):] {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

// run runs the shaper CLI with args (args[0] is the program name) until its
// command finishes or ctx ends.
func run(ctx context.Context, args []string) error {
	return runWith(ctx, os.Stdout, os.Stderr, args)
}

// runWith runs the CLI writing to stdout and stderr. Flags may follow
// positional arguments, as docs/cli.md shows them: shaper policies set
// orders --outflow 50/s.
func runWith(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	app := newApp(stdout, stderr)
	cmdline.Strict(app)
	return app.RunContext(ctx, cmdline.FlagsFirst(app, args))
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:    "shaper",
		Usage:   "a queue-backed request shaper: bounded per-key queues in JetStream, drained at a fixed rate",
		Version: cmdline.Version(),
		Commands: []*cli.Command{
			serveCommand(),
			policiesCommand(),
			statusCommand(),
			deferredCommand(),
			deadCommand(),
			recordCommand(),
			tuneCommand(),
			healthCommand(),
		},
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
	}
}

// exitBadPolicies is the exit code of serve and policies check for a policy
// file that cannot be read or is not valid: like a usage error, something
// to fix before running again (exit 1 is a failure while running).
const exitBadPolicies = 2

// envVar is the environment variable that also sets flag name.
func envVar(name string) []string {
	return []string{"SHAPER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}
