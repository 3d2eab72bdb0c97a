package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/shaper"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show every policy of a running shaper with its live figures",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "http", Value: shaper.DefaultHTTPAddr, Usage: "the shaper's HTTP address", EnvVars: envVar("http")},
			&cli.BoolFlag{Name: "json", Usage: "print the raw JSON"},
		},
		Action: func(c *cli.Context) error {
			client := &http.Client{Timeout: 5 * time.Second}
			resp, err := client.Get("http://" + c.String("http") + "/v1/policies")
			if err != nil {
				return fmt.Errorf("status: %w (is the shaper running? see --http)", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status: %s", resp.Status)
			}
			var body struct {
				Policies []json.RawMessage `json:"policies"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				return fmt.Errorf("status: %w", err)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(body)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "POLICY\tOUTFLOW\tQUEUE\tKEYS\tQUEUED\tADMITTED\tREJECTED\tDELIVERED\tFAILED\t")
			for _, raw := range body.Policies {
				var p struct {
					Name      string `json:"name"`
					Outflow   string `json:"outflow"`
					Queue     int    `json:"queue"`
					Keys      int    `json:"keys"`
					Queued    int64  `json:"queued"`
					Admitted  uint64 `json:"admitted"`
					Rejected  uint64 `json:"rejected"`
					Delivered uint64 `json:"delivered"`
					Failed    uint64 `json:"failed"`
				}
				if err := json.Unmarshal(raw, &p); err != nil {
					return fmt.Errorf("status: %w", err)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p.Name, p.Outflow, p.Queue, p.Keys, p.Queued, p.Admitted, p.Rejected, p.Delivered, p.Failed)
			}
			return tw.Flush()
		},
	}
}
