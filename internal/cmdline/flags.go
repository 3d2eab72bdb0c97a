// Package cmdline holds what the command lines of shaper and producer
// share: flags after positional arguments (shaper policies set orders
// --outflow 50/s; urfave/cli stops reading flags at the first positional
// argument, so FlagsFirst moves them before), and telling a terminal.
package cmdline

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// FlagsFirst returns args (args[0] is the program) with the flags of the
// (sub)command they run moved before its positional arguments, each flag
// with its value, in their order. Arguments after "--" stay where they
// are, positional.
func FlagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	// The command path: the leading arguments naming commands and
	// subcommands, with any flags among them left in place.
	commands, flags := app.Commands, app.Flags
	for len(rest) > 0 {
		if strings.HasPrefix(rest[0], "-") {
			n := flagLen(flags, rest)
			out = append(out, rest[:n]...)
			rest = rest[n:]
			continue
		}
		i := slices.IndexFunc(commands, func(c *cli.Command) bool { return c.HasName(rest[0]) })
		if i < 0 && len(out) == 1 && len(app.Commands) > 0 {
			return args // no command: urfave/cli says so
		}
		if i < 0 {
			break
		}
		out = append(out, rest[0])
		commands, flags = commands[i].Subcommands, commands[i].Flags
		rest = rest[1:]
	}
	var positional []string
	for len(rest) > 0 {
		switch {
		case rest[0] == "--":
			positional = append(positional, rest...)
			rest = nil
		case strings.HasPrefix(rest[0], "-") && rest[0] != "-":
			n := flagLen(flags, rest)
			out = append(out, rest[:n]...)
			rest = rest[n:]
		default:
			positional = append(positional, rest[0])
			rest = rest[1:]
		}
	}
	return append(out, positional...)
}

// flagLen is how many arguments the flag at args[0] takes up: 2 for a
// flag that takes a value given as the next argument, else 1.
func flagLen(flags []cli.Flag, args []string) int {
	name := strings.TrimLeft(args[0], "-")
	if strings.Contains(name, "=") || len(args) < 2 {
		return 1
	}
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		if _, isBool := f.(*cli.BoolFlag); isBool {
			return 1
		}
		return 2
	}
	return 1 // help, or unknown: urfave/cli says so
}
