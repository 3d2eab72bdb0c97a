package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

// run runs the producer CLI with args (args[0] is the program name) until
// its command finishes or ctx ends.
func run(ctx context.Context, args []string) error {
	return newApp(os.Stdout, os.Stderr).RunContext(ctx, args)
}

// newApp builds the CLI writing results to stdout and progress to stderr.
func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:  "producer",
		Usage: "drive a shaper with load (send) and measure the smoothed traffic it delivers (sink)",
		Commands: []*cli.Command{
			sendCommand(),
			sinkCommand(),
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
	return isTerminal(w)
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
