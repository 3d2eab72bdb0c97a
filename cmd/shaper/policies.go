package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
)

// showPolicy prints a policy as a change or reset left it.
func showPolicy(c *cli.Context, p client.Policy) {
	fmt.Fprintf(c.App.Writer, "%s: outflow %s per key, queue %d, overflow %s", p.Name, p.Outflow, p.Queue, p.Overflow)
	if !p.Total.IsZero() {
		fmt.Fprintf(c.App.Writer, ", total %s", p.Total)
	}
	if p.Override {
		fmt.Fprint(c.App.Writer, " (live override)")
	}
	fmt.Fprintln(c.App.Writer)
}

// policyChange is the change the flags of policies set ask for, and
// whether they ask for any.
func policyChange(c *cli.Context) (client.PolicyChange, bool, error) {
	var change client.PolicyChange
	for _, f := range []struct {
		flag string
		rate **policies.Rate
	}{{"outflow", &change.Outflow}, {"total", &change.Total}} {
		if !c.IsSet(f.flag) {
			continue
		}
		r := new(policies.Rate)
		if err := r.UnmarshalText([]byte(c.String(f.flag))); err != nil { // "" is the zero Rate: no cap
			return change, false, fmt.Errorf("--%s: %w", f.flag, err)
		}
		*f.rate = r
	}
	if c.IsSet("overflow") {
		o := policies.Overflow(c.String("overflow")) // the shaper checks it
		change.Overflow = &o
	}
	if c.IsSet("queue") {
		q := c.Int("queue")
		change.Queue = &q
	}
	return change, change != client.PolicyChange{}, nil
}

func policiesCommand() *cli.Command {
	return &cli.Command{
		Name:  "policies",
		Usage: "check policy files; tune a running shaper's policies",
		Subcommands: []*cli.Command{{
			Name:      "set",
			Usage:     "tune a policy of running shapers live (kept as an override until reset)",
			ArgsUsage: "NAME",
			Flags: append(apiFlags(),
				&cli.StringFlag{Name: "outflow", Usage: "per-key rate, e.g. 20/s", DefaultText: "unchanged"},
				&cli.IntFlag{Name: "queue", Usage: "jobs a key may hold", DefaultText: "unchanged"},
				&cli.StringFlag{Name: "total", Usage: "outflow cap over all keys (\"\" removes it)", DefaultText: "unchanged"},
				&cli.StringFlag{Name: "overflow", Usage: "reject or defer", DefaultText: "unchanged"},
			),
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cli.Exit("usage: shaper policies set NAME [--outflow R] [--queue N] [--total R] [--overflow reject|defer]", 2)
				}
				change, ok, err := policyChange(c)
				if err != nil {
					return cli.Exit("shaper policies set: "+err.Error(), cmdline.ExitUsage)
				}
				if !ok {
					return cli.Exit("policies set: nothing to change (give --outflow, --queue, --total or --overflow)", 2)
				}
				api, err := apiClient(c, time.Minute)
				if err != nil {
					return err
				}
				p, err := api.SetPolicy(c.Context, c.Args().First(), change)
				if err != nil {
					return apiError(err)
				}
				showPolicy(c, p)
				return nil
			},
		}, {
			Name:      "reset",
			Usage:     "drop a policy's live override: back to the policy file",
			ArgsUsage: "NAME",
			Flags:     apiFlags(),
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cli.Exit("usage: shaper policies reset NAME", 2)
				}
				api, err := apiClient(c, time.Minute)
				if err != nil {
					return err
				}
				p, err := api.ResetPolicy(c.Context, c.Args().First())
				if err != nil {
					return apiError(err)
				}
				showPolicy(c, p)
				return nil
			},
		}, {
			Name:      "check",
			Usage:     "validate a policy file; exit 2 naming the line of every error",
			ArgsUsage: "FILE",
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cli.Exit("usage: shaper policies check FILE", 2)
				}
				set, err := policies.Load(c.Args().First())
				if err != nil {
					return cli.Exit(err.Error(), exitBadPolicies)
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
