package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/shaper/client"
)

func deadCommand() *cli.Command {
	filters := append(apiFlags(),
		&cli.StringFlag{Name: "policy", Usage: "only this policy"},
		&cli.StringFlag{Name: "key", Usage: "only this key"},
		&cli.StringFlag{Name: "reason", Usage: "only this reason: attempts, deadline, delivery or undecodable"},
	)
	return &cli.Command{
		Name:  "dead",
		Usage: "list, show, replay or purge dead-lettered jobs of a running shaper",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list dead letters, a page at a time",
				Flags: append(filters[:len(filters):len(filters)], pageFlags()...),
				Action: func(c *cli.Context) error {
					api, err := apiClient(c, time.Minute)
					if err != nil {
						return err
					}
					f := deadFilter(c)
					f.Limit = c.Int("limit")
					return listing[client.DeadLetter]{
						cmd:  "dead list",
						what: "dead letter",
						page: func(after string) ([]client.DeadLetter, string, error) {
							f.After = after
							p, err := api.DeadLetterPage(c.Context, f)
							return p.Dead, p.Next, err
						},
						header: "POLICY\tSEQ\tKEY\tJOB\tREASON\tFROM\tATTEMPTS\tAT\tLAST",
						row: func(d client.DeadLetter) string {
							last := ""
							if n := len(d.History); n > 0 {
								_, last, _ = strings.Cut(d.History[n-1], " ") // drop the timestamp
							}
							return fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s", d.Policy, d.Seq, printable(d.Key), d.ID, d.Reason, d.From, d.Attempts, d.At.Format(time.RFC3339), printable(last))
						},
						json: func(dead []client.DeadLetter, next string) any { return client.DeadPage{Dead: dead, Next: next} },
					}.run(c)
				},
			},
			{
				Name:      "show",
				Usage:     "show one dead letter with its history and payload",
				ArgsUsage: "POLICY SEQ",
				Flags:     apiFlags(),
				Action: func(c *cli.Context) error {
					if err := cmdline.Args(c, "shaper dead show POLICY SEQ", "POLICY", "SEQ"); err != nil {
						return err
					}
					seq, err := strconv.ParseUint(c.Args().Get(1), 10, 64)
					if err != nil || seq == 0 {
						return cli.Exit(fmt.Sprintf("shaper dead show: bad sequence %q: want a positive number, as shaper dead list shows", c.Args().Get(1)), cmdline.ExitUsage)
					}
					api, err := apiClient(c, time.Minute)
					if err != nil {
						return err
					}
					d, err := api.DeadLetter(c.Context, c.Args().Get(0), seq)
					if err != nil {
						return apiError(err, "dead show")
					}
					enc := json.NewEncoder(c.App.Writer)
					enc.SetIndent("", "  ")
					return enc.Encode(d)
				},
			},
			{
				Name:  "replay",
				Usage: "submit matching dead letters again through the normal admission path",
				Description: `Each dead letter replayed becomes a new job, with a new id: a line says
POLICY SEQ: job OLD-ID → NEW-ID for each. The old id's status
(GET /v1/jobs/OLD-ID) then says replayed, with replayed_as the new id.`,
				Flags: filters,
				Action: func(c *cli.Context) error {
					return apply(c, (*client.Client).ReplayDead, "replayed", replayed)
				},
			},
			{
				Name:  "purge",
				Usage: "delete matching dead letters for good",
				Flags: append(filters[:len(filters):len(filters)], &cli.BoolFlag{Name: "all", Usage: "purge every policy's dead letters (needed without --policy)"}),
				Action: func(c *cli.Context) error {
					if c.String("policy") == "" && !c.Bool("all") {
						return cli.Exit("shaper dead purge: name a --policy, or say --all", cmdline.ExitUsage)
					}
					return apply(c, (*client.Client).PurgeDead, "purged", nil)
				},
			},
		},
	}
}

// deadFilter is the filter the --policy, --key and --reason flags ask for.
func deadFilter(c *cli.Context) client.DeadFilter {
	return client.DeadFilter{Policy: c.String("policy"), Key: c.String("key"), Reason: c.String("reason")}
}

// apply replays or purges (do) the dead letters the flags select, says
// what it did with each one (each, when not nil) and how many it did
// (verb).
func apply(c *cli.Context, do func(*client.Client, context.Context, client.DeadFilter) (client.DeadReport, error), verb string, each func(client.DeadResult) string) error {
	api, err := apiClient(c, time.Minute)
	if err != nil {
		return err
	}
	res, err := do(api, c.Context, deadFilter(c))
	if err != nil {
		return apiError(err, commandName(c))
	}
	if each != nil {
		for _, r := range res.Results {
			fmt.Fprintln(c.App.Writer, each(r))
		}
	}
	fmt.Fprintf(c.App.Writer, "%d matched, %d %s\n", res.Matched, res.Done, verb)
	if res.Done < res.Matched {
		return cli.Exit(fmt.Sprintf("%d dead letters were not %s (see the shaper's log)", res.Matched-res.Done, verb), 1)
	}
	return nil
}

// replayed says what a replay did with one dead letter: the new id of its
// job, or why it is still a dead letter.
func replayed(r client.DeadResult) string {
	at := fmt.Sprintf("%s %d: job %s", r.Policy, r.Seq, r.ID)
	switch {
	case r.Done:
		return at + " → " + r.NewID
	case r.NewID != "":
		return at + " → " + r.NewID + ", but the dead letter was not removed (" + cmp.Or(r.Why, "see the shaper's log") + ")"
	}
	if r.Why != "" {
		return at + " not replayed: " + r.Why + "; still a dead letter"
	}
	return at + " not replayed: admission did not take it (its key is full, its limit said no, or a backend failed); still a dead letter"
}

// printable keeps a key or message on one table row: one with a control
// character (or a leading quote) is shown quoted as Go quotes it ("a\tb"),
// so that keys that differ only there stay apart and can be typed again
// (--key $'a\tb'); a row of "?" for each hid which key it was.
func printable(s string) string {
	if strings.HasPrefix(s, `"`) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		s = strconv.Quote(s)
	}
	if r := []rune(s); len(r) > 80 {
		s = string(r[:80]) + "…"
	}
	return s
}

// plural says n things: "1 dead letter", "2 dead letters".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
