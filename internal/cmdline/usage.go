package cmdline

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/suggest"
)

// ExitUsage is the exit code of a bad command line: an unknown command or
// flag, a flag's value that does not parse, a required flag missing.
const ExitUsage = 2

// Strict makes every usage error of app and its commands an error with
// exit code ExitUsage, said once by the caller (not with the whole help
// before it): an unknown flag or command, a bad flag value, a required
// flag left out. A leaf command's help lists no help command.
func Strict(app *cli.App) {
	app.OnUsageError = usageError
	if app.Action == nil {
		app.Action = unknownCommand(app.Name, app.Commands, cli.ShowAppHelp)
	}
	req := required{}
	app.Before = req.check(app.Flags, app.Before)
	for _, c := range app.Commands {
		strictCommand(app.Name, c, req)
	}
}

func strictCommand(parent string, c *cli.Command, req required) {
	c.OnUsageError = usageError
	c.Before = req.check(c.Flags, c.Before)
	name := parent + " " + c.Name
	if len(c.Subcommands) == 0 {
		c.HideHelpCommand = true
		if c.ArgsUsage == "" && c.Action != nil {
			c.Action = noArgs(name, c.Action)
		}
		return
	}
	if c.Action == nil {
		c.Action = unknownCommand(name, c.Subcommands, cli.ShowSubcommandHelp)
	}
	if c.UsageText == "" {
		c.UsageText = name + " COMMAND [options] [arguments]"
	}
	for _, sub := range c.Subcommands {
		strictCommand(name, sub, req)
	}
}

// noArgs wraps the action of command name, which takes no arguments
// (no ArgsUsage): an argument given is refused (exit 2) before the action
// runs. urfave/cli leaves them to the action, which ignored them: `shaper
// dead replay orders` replayed every policy's dead letters. For a command
// with a --policy flag, the argument is suggested as its value.
func noArgs(name string, action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.Args().Len() == 0 {
			return action(c)
		}
		got := c.Args().First()
		hint := ""
		if flagNamed(c.Command.Flags, "policy") != nil && !strings.HasPrefix(got, "-") {
			hint = fmt.Sprintf(" (did you mean --policy %s?)", got)
		}
		return cli.Exit(fmt.Sprintf("%s: unexpected argument %q: it takes none, only flags%s (see %s --help)", name, got, hint, name), ExitUsage)
	}
}

// required holds the flags whose Required mark Strict took off: for a
// required flag left out, urfave/cli prints the command's whole help with
// the error last; Strict checks them itself, in the command's Before (after
// --help, before the action), and says only what is missing. Flags shared
// by several commands are in it once.
type required map[cli.Flag]bool

// check takes the Required mark off flags, noting it in their usage, and
// returns a Before that refuses a command line without them and then runs
// before.
func (req required) check(flags []cli.Flag, before cli.BeforeFunc) cli.BeforeFunc {
	var names []string
	for _, f := range flags {
		if !req[f] && !unrequire(f) {
			continue
		}
		req[f] = true
		names = append(names, f.Names()[0])
	}
	if len(names) == 0 {
		return before
	}
	return func(c *cli.Context) error {
		var missing []string
		for _, n := range names {
			if !c.IsSet(n) {
				missing = append(missing, "--"+n)
			}
		}
		switch len(missing) {
		case 0:
			if before != nil {
				return before(c)
			}
			return nil
		case 1:
			return cli.Exit(fmt.Sprintf("%s: %s is required (see %s --help)", fullName(c), missing[0], fullName(c)), ExitUsage)
		}
		last := len(missing) - 1
		return cli.Exit(fmt.Sprintf("%s: %s and %s are required (see %s --help)",
			fullName(c), strings.Join(missing[:last], ", "), missing[last], fullName(c)), ExitUsage)
	}
}

// unrequire takes the Required mark off f, adding "(required)" to its
// usage, and reports whether it had one. Every flag type of urfave/cli
// is a struct with the fields Required and Usage.
func unrequire(f cli.Flag) bool {
	rf, ok := f.(cli.RequiredFlag)
	if !ok || !rf.IsRequired() {
		return false
	}
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	mark, usage := v.Elem().FieldByName("Required"), v.Elem().FieldByName("Usage")
	if mark.Kind() != reflect.Bool || !mark.CanSet() {
		return false
	}
	mark.SetBool(false)
	if usage.Kind() == reflect.String && usage.CanSet() && !strings.Contains(usage.String(), "required") {
		usage.SetString(strings.TrimSpace(usage.String() + " (required)"))
	}
	return true
}

// usageError is the OnUsageError of every command.
// An unknown flag gets the hint of the flag it was probably meant to be; a
// flag's value that does not parse, what the flag wants.
func usageError(c *cli.Context, err error, _ bool) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if _, err := strconv.ParseFloat(name, 64); err == nil {
			// An argument such as -1, read as a flag: no flag's name is
			// like it, and a command's numbers are never negative.
			msg = fmt.Sprintf("-%s: a negative number is no argument of %s", name, fullName(c))
		} else {
			// The flag package names it with one dash whatever was typed;
			// the docs and --help write flags with two.
			name = strings.TrimPrefix(name, "-")
			dashes := "--"
			if len(name) == 1 {
				dashes = "-" // a short flag, as -h
			}
			msg = "unknown flag " + dashes + name + suggest.FlagHint(name, flagNames(c))
		}
	} else if m, ok := badValue(commandFlags(c), msg); ok {
		msg = m
	}
	return cli.Exit(fmt.Sprintf("%s: %s (see %s --help)", fullName(c), msg, fullName(c)), ExitUsage)
}

// badValue rewords urfave/cli's error for a flag value that does not parse,
// `invalid value "3" for flag -max-wait: parse error`, to say what the flag
// wants: `invalid value "3" for --max-wait: want a duration such as 500ms,
// 90s, 5m or 24h (did you mean "3s"?)`. It reports false for any
// other message.
func badValue(flags []cli.Flag, msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, "invalid value ")
	if !ok {
		return "", false
	}
	i := strings.Index(rest, " for flag -")
	if i < 0 {
		return "", false
	}
	value, err := strconv.Unquote(rest[:i])
	if err != nil {
		return "", false
	}
	name, reason, ok := strings.Cut(rest[i+len(" for flag -"):], ": ")
	if !ok {
		return "", false
	}
	var want string
	switch flagNamed(flags, name).(type) {
	case *cli.DurationFlag:
		want = suggest.WantDuration(value)
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
		want = "want a whole number"
	case *cli.Float64Flag:
		want = "want a number"
	case *cli.BoolFlag:
		want = "want true or false"
	default:
		return "", false
	}
	if reason != "parse error" {
		want += " (" + reason + ")"
	}
	return fmt.Sprintf("invalid value %q for --%s: %s", value, name, want), true
}

// flagNamed returns the flag of flags with name (or alias) name, nil if
// none has it.
func flagNamed(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// Args refuses a command line that does not give a command exactly the
// positional arguments names (NAME, FILE ...): it says which is missing or
// which is one too many, then the command's usage line.
//
//	shaper policies set: missing NAME; usage: shaper policies set NAME [--outflow R] ...
func Args(c *cli.Context, usage string, names ...string) error {
	got := c.Args().Slice()
	switch {
	case len(got) < len(names):
		return cli.Exit(fmt.Sprintf("%s: missing %s; usage: %s", fullName(c), strings.Join(names[len(got):], " "), usage), ExitUsage)
	case len(got) > len(names):
		return cli.Exit(fmt.Sprintf("%s: unexpected argument %q (it takes %s); usage: %s", fullName(c), got[len(names)], strings.Join(names, " "), usage), ExitUsage)
	}
	return nil
}

// flagNames lists the names of the flags of c's command (the app's at the
// top), aliases too.
func flagNames(c *cli.Context) []string {
	var names []string
	for _, f := range commandFlags(c) {
		for _, n := range f.Names() {
			// A one-letter alias (-h) is as near to any other letter as
			// to a typo of it: no hint at all says more.
			if len(n) > 1 {
				names = append(names, n)
			}
		}
	}
	return names
}

// commandFlags returns the flags of c's command (the app's at the top).
func commandFlags(c *cli.Context) []cli.Flag {
	if c.Command != nil && c.Command.Name != "" {
		return c.Command.Flags
	}
	return c.App.Flags
}

// unknownCommand is the action of a command that only groups others: with
// no argument it shows its help, with one it says that no such command
// exists and which do. "help" shows its help, and "help COMMAND" that
// command's, where the app hides urfave/cli's own help command.
func unknownCommand(name string, commands []*cli.Command, help func(*cli.Context) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if !c.Args().Present() {
			return help(c)
		}
		var names []string
		for _, cmd := range commands {
			if !cmd.Hidden {
				names = append(names, cmd.Name)
			}
		}
		if c.Args().First() == "help" {
			topic := c.Args().Get(1)
			if topic == "" {
				return help(c)
			}
			for _, cmd := range commands {
				if cmd.HasName(topic) {
					// What "COMMAND --help" says (cli.ShowCommandHelp
					// leaves out a command group's commands).
					lineage := strings.Fields(name)[1:]
					return c.App.RunContext(c.Context, append(append([]string{c.App.Name}, lineage...), topic, "--help"))
				}
			}
			return cli.Exit(fmt.Sprintf("%s: no command %q to help with; the commands are %s%s (see %s --help)",
				name, topic, strings.Join(names, ", "), suggest.Hint(topic, names), name), ExitUsage)
		}
		return cli.Exit(fmt.Sprintf("%s: no command %q; the commands are %s%s (see %s --help)",
			name, c.Args().First(), strings.Join(names, ", "), suggest.Hint(c.Args().First(), names), name), ExitUsage)
	}
}

func fullName(c *cli.Context) string {
	var names []string
	for _, l := range c.Lineage() {
		// The app's own root command bears its name.
		if l.Command != nil && l.Command.Name != "" && l.Command.Name != c.App.Name {
			names = append(names, l.Command.Name)
		}
	}
	names = append(names, c.App.Name)
	slices.Reverse(names)
	return strings.Join(names, " ")
}

// ExitCode is the exit code of a command's error: its own when it has one
// (cli.Exit), ExitUsage for a required flag left out, 1 otherwise; 0 for
// no error.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if strings.HasPrefix(err.Error(), "Required flag") {
		return ExitUsage
	}
	return 1
}
