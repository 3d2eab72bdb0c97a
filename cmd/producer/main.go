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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args)
	stop()
	if err != nil {
		if msg := err.Error(); msg != "" {
			if !strings.HasPrefix(msg, "producer") {
				msg = "producer: " + msg
			}
			fmt.Fprintln(os.Stderr, msg)
		}
		os.Exit(cmdline.ExitCode(err))
	}
}

// run runs the producer CLI with args (args[0] is the program name) until
// its command finishes or ctx ends.
func run(ctx context.Context, args []string) error {
	return runWith(ctx, os.Stdout, os.Stderr, args)
}

// runWith runs the CLI writing results to stdout and progress to stderr;
// flags may follow positional arguments.
func runWith(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	app := newApp(stdout, stderr)
	cmdline.Strict(app)
	return app.RunContext(ctx, cmdline.FlagsFirst(app, args))
}

// newApp builds the CLI writing results to stdout and progress to stderr.
func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:    "producer",
		Usage:   "drive a shaper with load (send) and measure the smoothed traffic it delivers (sink)",
		Version: cmdline.Version(),
		Commands: []*cli.Command{
			sendCommand(),
			sinkCommand(),
			traceCommand(),
		},
		Writer:                    stdout,
		ErrWriter:                 stderr,
		HideHelpCommand:           true,
		DisableSliceFlagSeparator: true,
		// Errors are returned to main, which prints them once.
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

// envVar is the environment variable that also sets flag name.
func envVar(name string) []string {
	b := []byte("PRODUCER_" + name)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return []string{string(b)}
}

// showProgress reports whether live progress lines go to w: always when
// forced, otherwise only when w is a terminal.
func showProgress(w io.Writer, forced bool) bool {
	if forced {
		return true
	}
	return cmdline.IsTerminal(w)
}
