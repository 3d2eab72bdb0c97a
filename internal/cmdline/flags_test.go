package cmdline

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestFlagsFirst(t *testing.T) {
	app := &cli.App{Commands: []*cli.Command{{
		Name: "policies",
		Subcommands: []*cli.Command{{
			Name: "set",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "outflow"},
				&cli.IntFlag{Name: "queue", Aliases: []string{"q"}},
				&cli.BoolFlag{Name: "json"},
			},
		}},
	}}}
	for _, tt := range []struct{ in, want []string }{
		{[]string{"shaper"}, []string{"shaper"}},
		{[]string{"shaper", "policies", "set", "orders", "--outflow", "50/s"}, []string{"shaper", "policies", "set", "--outflow", "50/s", "orders"}},
		{[]string{"shaper", "policies", "set", "--outflow", "50/s", "orders"}, []string{"shaper", "policies", "set", "--outflow", "50/s", "orders"}},
		{[]string{"shaper", "policies", "set", "orders", "--json", "-q", "3", "--outflow=5/s"}, []string{"shaper", "policies", "set", "--json", "-q", "3", "--outflow=5/s", "orders"}},
		{[]string{"shaper", "policies", "set", "orders", "--", "--outflow"}, []string{"shaper", "policies", "set", "orders", "--", "--outflow"}},
		{[]string{"shaper", "policies", "set", "a", "--bogus", "b"}, []string{"shaper", "policies", "set", "--bogus", "a", "b"}},
		{[]string{"shaper", "nope", "x", "--outflow", "1"}, []string{"shaper", "nope", "x", "--outflow", "1"}},
	} {
		if got := FlagsFirst(app, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("FlagsFirst(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Every kind of bad command line is an error with exit code ExitUsage that
// names the command, said once: an unknown flag, an unknown command, a
// required flag left out.
func TestStrict(t *testing.T) {
	app := &cli.App{Name: "shaper", HideHelpCommand: true, Writer: io.Discard, ErrWriter: io.Discard,
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{{
			Name: "policies",
			Subcommands: []*cli.Command{{
				Name:   "set",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "outflow", Required: true}},
				Action: func(*cli.Context) error { return nil },
			}},
		}}}
	Strict(app)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"shaper", "policies", "set", "--bogus"}, "shaper policies set: flag provided but not defined: -bogus"},
		{[]string{"shaper", "nosuch"}, `shaper: no command "nosuch"; the commands are policies`},
		{[]string{"shaper", "policies", "nosuch"}, `shaper policies: no command "nosuch"; the commands are set`},
		{[]string{"shaper", "policies", "set"}, `Required flag "outflow" not set`},
	} {
		err := app.Run(tt.args)
		if err == nil || ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v (exit %d), want exit %d saying %q", tt.args, err, ExitCode(err), ExitUsage, tt.want)
		}
	}
	if err := app.Run([]string{"shaper", "policies", "set", "--outflow", "5/s"}); err != nil {
		t.Errorf("a good command line: %v", err)
	}
}
