package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/policies"
)

func policiesCommand() *cli.Command {
	return &cli.Command{
		Name:  "policies",
		Usage: "work with policy files",
		Subcommands: []*cli.Command{{
			Name:      "check",
			Usage:     "validate a policy file; exit 1 naming the line of the first error",
			ArgsUsage: "FILE",
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cli.Exit("usage: shaper policies check FILE", 2)
				}
				set, err := policies.Load(c.Args().First())
				if err != nil {
					return cli.Exit(err.Error(), 1)
				}
				for _, p := range set.Policies() {
					line := fmt.Sprintf("%s: outflow %s per key, queue %d, overflow %s", p.Name, p.Outflow, p.Queue, p.Overflow)
					if !p.Total.IsZero() {
						line += ", total " + p.Total.String()
					}
					if p.Deliver.Webhook != "" {
						line += ", webhook " + p.Deliver.Webhook
					} else {
						line += ", deliver " + p.DeliverSubject() + ".<key>"
					}
					fmt.Fprintln(c.App.Writer, line)
				}
				fmt.Fprintf(c.App.Writer, "%s: %d policies OK\n", c.Args().First(), len(set.Policies()))
				return nil
			},
		}},
	}
}
