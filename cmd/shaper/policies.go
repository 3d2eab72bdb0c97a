package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
)

// showPolicy sends a policy change and prints the policy as it now is.
func showPolicy(c *cli.Context, method, path, body string) error {
	req, err := http.NewRequestWithContext(c.Context, method, "http://"+c.String("http")+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	var p shaper.PolicyStatus
	if _, err := send(req, &p); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%s: outflow %s per key, queue %d, overflow %s", p.Name, p.Outflow, p.Queue, p.Overflow)
	if !p.Total.IsZero() {
		fmt.Fprintf(c.App.Writer, ", total %s", p.Total)
	}
	if p.Override {
		fmt.Fprint(c.App.Writer, " (live override)")
	}
	fmt.Fprintln(c.App.Writer)
	return nil
}

func policiesCommand() *cli.Command {
	httpFlag := &cli.StringFlag{Name: "http", Value: shaper.DefaultHTTPAddr, Usage: "the shaper's HTTP address", EnvVars: envVar("http")}
	return &cli.Command{
		Name:  "policies",
		Usage: "check policy files; tune a running shaper's policies",
		Subcommands: []*cli.Command{{
			Name:      "set",
			Usage:     "tune a policy of running shapers live (kept as an override until reset)",
			ArgsUsage: "NAME",
			Flags: []cli.Flag{httpFlag,
				&cli.StringFlag{Name: "outflow", Usage: "per-key rate, e.g. 20/s"},
				&cli.IntFlag{Name: "queue", Usage: "jobs a key may hold"},
				&cli.StringFlag{Name: "total", Usage: "outflow cap over all keys (\"\" removes it)"},
				&cli.StringFlag{Name: "overflow", Usage: "reject or defer"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cli.Exit("usage: shaper policies set NAME [--outflow R] [--queue N] [--total R] [--overflow reject|defer]", 2)
				}
				change := map[string]any{}
				for _, f := range []string{"outflow", "total", "overflow"} {
					if c.IsSet(f) {
						change[f] = c.String(f)
					}
				}
				if c.IsSet("queue") {
					change["queue"] = c.Int("queue")
				}
				if len(change) == 0 {
					return cli.Exit("policies set: nothing to change (give --outflow, --queue, --total or --overflow)", 2)
				}
				body, _ := json.Marshal(change)
				return showPolicy(c, http.MethodPut, "/v1/policies/"+url.PathEscape(c.Args().First()), string(body))
			},
		}, {
			Name:      "reset",
			Usage:     "drop a policy's live override: back to the policy file",
			ArgsUsage: "NAME",
			Flags:     []cli.Flag{httpFlag},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cli.Exit("usage: shaper policies reset NAME", 2)
				}
				return showPolicy(c, http.MethodDelete, "/v1/policies/"+url.PathEscape(c.Args().First())+"/override", "")
			},
		}, {
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
