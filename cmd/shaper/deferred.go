package main

import (
	"cmp"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/shaper/client"
)

func deferredCommand() *cli.Command {
	return &cli.Command{
		Name:  "deferred",
		Usage: "list the jobs a running shaper deferred behind their key's full queue",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list deferred jobs, a page at a time",
				Flags: append(append(apiFlags(),
					&cli.StringFlag{Name: "policy", Usage: "only this policy"},
					&cli.StringFlag{Name: "key", Usage: "only this key"},
				), pageFlags()...),
				Action: func(c *cli.Context) error {
					api, err := apiClient(c, time.Minute)
					if err != nil {
						return err
					}
					f := client.DeferredFilter{Policy: c.String("policy"), Key: c.String("key"), Limit: c.Int("limit")}
					return listing[client.DeferredJob]{
						cmd:  "deferred list",
						what: "deferred job",
						page: func(after string) ([]client.DeferredJob, string, error) {
							f.After = after
							p, err := api.DeferredJobs(c.Context, f)
							return p.Deferred, p.Next, err
						},
						// WHY: why a job past its next try still waits, else
						// why its last re-admission failed.
						header: "POLICY\tSEQ\tKEY\tJOB\tDEFERRED\tDEFERRALS\tNEXT TRY\tWHY",
						row: func(j client.DeferredJob) string {
							next := "-"
							if !j.NextTry.IsZero() {
								next = j.NextTry.Format(time.RFC3339)
							}
							if j.Reason != "" { // past it: WHY says what it waits for
								next += " (past)"
							}
							return fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s", j.Policy, j.Seq, printable(j.Key), j.ID,
								j.DeferredAt.Format(time.RFC3339), j.Deferrals, next, printable(cmp.Or(j.Reason, j.LastError)))
						},
						json: func(jobs []client.DeferredJob, next string) any {
							return client.DeferredPage{Deferred: jobs, Next: next}
						},
					}.run(c)
				},
			},
		},
	}
}
