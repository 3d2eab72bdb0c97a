package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/shaper/client"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show every policy of a running shaper with its live figures",
		Flags: append(apiFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print the raw JSON"},
		),
		Action: func(c *cli.Context) error {
			api, err := apiClient(c, 5*time.Second)
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			all, err := api.Policies(c.Context)
			if err != nil {
				return fmt.Errorf("status: %w", apiError(err))
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Policies []client.Policy `json:"policies"`
				}{all})
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "POLICY\tOUTFLOW\tQUEUE\tKEYS\tQUEUED\tADMITTED\tREJECTED\tDELIVERED\tFAILED\t")
			for _, p := range all {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p.Name, p.Outflow, p.Queue, p.Keys, p.Queued, p.Admitted, p.Rejected, p.Delivered, p.Failed)
			}
			return tw.Flush()
		},
	}
}
