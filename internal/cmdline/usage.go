package cmdline

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// ExitUsage is the exit code of a bad command line: an unknown command or
// flag, a flag's value that does not parse, a required flag missing.
const ExitUsage = 2

// Strict makes every usage error of app and its commands an error with
// exit code ExitUsage, said once by the caller (not with the whole help
// after it): an unknown flag or command, a bad flag value. A leaf command's
// help lists no help command.
func Strict(app *cli.App) {
	app.OnUsageError = usageError
	if app.Action == nil {
		app.Action = unknownCommand(app.Name, app.Commands, cli.ShowAppHelp)
	}
	for _, c := range app.Commands {
		strictCommand(app.Name, c)
	}
}

func strictCommand(parent string, c *cli.Command) {
	c.OnUsageError = usageError
	name := parent + " " + c.Name
	if len(c.Subcommands) == 0 {
		c.HideHelpCommand = true
		return
	}
	if c.Action == nil {
		c.Action = unknownCommand(name, c.Subcommands, cli.ShowSubcommandHelp)
	}
	if c.UsageText == "" {
		c.UsageText = name + " COMMAND [options] [arguments]"
	}
	for _, sub := range c.Subcommands {
		strictCommand(name, sub)
	}
}

// usageError is the OnUsageError of every command.
func usageError(c *cli.Context, err error, _ bool) error {
	return cli.Exit(fmt.Sprintf("%s: %v (see %s --help)", fullName(c), err, fullName(c)), ExitUsage)
}

// unknownCommand is the action of a command that only groups others: with
// no argument it shows its help, with one it says that no such command
// exists and which do.
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
		return cli.Exit(fmt.Sprintf("%s: no command %q; the commands are %s (see %s --help)",
			name, c.Args().First(), strings.Join(names, ", "), name), ExitUsage)
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
