package cmdline

import (
	"bytes"
	"io"
	"runtime/debug"
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
// names the command, said once and without the help: an unknown flag, an
// unknown command, a required flag left out.
func TestStrict(t *testing.T) {
	var out bytes.Buffer
	app := &cli.App{Name: "shaper", HideHelpCommand: true, Writer: &out, ErrWriter: io.Discard,
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
		{[]string{"shaper", "policies", "set", "--bogus"}, "shaper policies set: unknown flag --bogus"},
		{[]string{"shaper", "nosuch"}, `shaper: no command "nosuch"; the commands are policies`},
		{[]string{"shaper", "policies", "nosuch"}, `shaper policies: no command "nosuch"; the commands are set`},
		{[]string{"shaper", "polices"}, `shaper: no command "polices"; the commands are policies (did you mean "policies"?) (see shaper --help)`},
		{[]string{"shaper", "policies", "set", "--outflw", "1/s"}, `unknown flag --outflw (did you mean "--outflow"?) (see shaper policies set --help)`},
		{[]string{"shaper", "policies", "set"}, `shaper policies set: --outflow is required (see shaper policies set --help)`},
	} {
		out.Reset()
		err := app.Run(tt.args)
		if err == nil || ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v (exit %d), want exit %d saying %q", tt.args, err, ExitCode(err), ExitUsage, tt.want)
		}
		if out.Len() > 0 {
			t.Errorf("%q printed %q besides the error, want nothing", tt.args, out.String())
		}
	}
	if err := app.Run([]string{"shaper", "policies", "set", "--outflow", "5/s"}); err != nil {
		t.Errorf("a good command line: %v", err)
	}
}

// A required flag left out is said in one line naming every one missing;
// --help still works without them, and so does a flag set by its
// environment variable. The help says which flags are required.
func TestStrictRequired(t *testing.T) {
	var out bytes.Buffer
	ran := 0
	// One flag shared by two commands, as the commands' flag lists share them.
	token := &cli.StringFlag{Name: "token", Required: true, EnvVars: []string{"TEST_STRICT_TOKEN"}}
	app := &cli.App{Name: "producer", HideHelpCommand: true, Writer: &out, ErrWriter: io.Discard,
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{{
			Name:   "send",
			Flags:  []cli.Flag{&cli.StringFlag{Name: "policy", Required: true, Usage: "policy `NAME`"}, &cli.IntFlag{Name: "jobs", Required: true}, token},
			Action: func(*cli.Context) error { ran++; return nil },
		}, {
			Name:   "sink",
			Flags:  []cli.Flag{token},
			Action: func(*cli.Context) error { ran++; return nil },
		}}}
	Strict(app)
	err := app.Run([]string{"producer", "send"})
	if want := "producer send: --policy, --jobs and --token are required (see producer send --help)"; err == nil || err.Error() != want || ExitCode(err) != ExitUsage {
		t.Errorf("send without its flags: %v (exit %d), want %q (exit %d)", err, ExitCode(err), want, ExitUsage)
	}
	err = app.Run([]string{"producer", "sink"})
	if want := "producer sink: --token is required (see producer sink --help)"; err == nil || err.Error() != want {
		t.Errorf("sink without --token: %v, want %q", err, want)
	}
	if out.Len() > 0 || ran > 0 {
		t.Errorf("refused command lines printed %q and ran %d actions, want nothing", out.String(), ran)
	}
	if err := app.Run([]string{"producer", "send", "--help"}); err != nil || !strings.Contains(out.String(), "policy NAME (required)") {
		t.Errorf("send --help = %v, %q; want the help marking --policy required", err, out.String())
	}
	t.Setenv("TEST_STRICT_TOKEN", "x")
	if err := app.Run([]string{"producer", "send", "--policy", "p", "--jobs", "3"}); err != nil || ran != 1 {
		t.Errorf("send with every flag (--token from its variable) = %v, ran %d", err, ran)
	}
}

// --version says the module's version, the commit and the Go release.
func TestVersion(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionOf(info), "v1.2.3 commit 0123456789ab+dirty go1.26.0"; got != want {
		t.Errorf("versionOf = %q, want %q", got, want)
	}
	if got, want := versionOf(&debug.BuildInfo{GoVersion: "go1.26.0"}), "(devel) go1.26.0"; got != want {
		t.Errorf("versionOf without a version = %q, want %q", got, want)
	}
	if Version() == "" {
		t.Error("Version is empty")
	}
}
