package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/shaper"
)

func deadCommand() *cli.Command {
	httpFlag := &cli.StringFlag{Name: "http", Value: shaper.DefaultHTTPAddr, Usage: "the shaper's HTTP address", EnvVars: envVar("http")}
	filters := []cli.Flag{
		httpFlag,
		&cli.StringFlag{Name: "policy", Usage: "only this policy"},
		&cli.StringFlag{Name: "key", Usage: "only this key"},
		&cli.StringFlag{Name: "reason", Usage: "only this reason: attempts, deadline or delivery"},
	}
	return &cli.Command{
		Name:  "dead",
		Usage: "list, show, replay or purge dead-lettered jobs of a running shaper",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list dead letters",
				Flags: append(filters, &cli.IntFlag{Name: "limit", Value: 100, Usage: "at most this many"}, &cli.BoolFlag{Name: "json", Usage: "print JSON"}),
				Action: func(c *cli.Context) error {
					var body struct {
						Dead []shaper.DeadLetter `json:"dead"`
					}
					q := deadQuery(c)
					q.Set("limit", fmt.Sprint(c.Int("limit")))
					raw, err := call(c, http.MethodGet, "/v1/dead?"+q.Encode(), &body)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						_, err := c.App.Writer.Write(raw)
						return err
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "POLICY\tSEQ\tKEY\tJOB\tREASON\tFROM\tATTEMPTS\tAT\tLAST")
					for _, d := range body.Dead {
						last := ""
						if n := len(d.History); n > 0 {
							_, last, _ = strings.Cut(d.History[n-1], " ") // drop the timestamp
						}
						fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.Policy, d.Seq, printable(d.Key), d.ID, d.Reason, d.From, d.Attempts, d.At.Format(time.RFC3339), printable(last))
					}
					tw.Flush()
					fmt.Fprintf(c.App.ErrWriter, "%d dead letters\n", len(body.Dead))
					return nil
				},
			},
			{
				Name:      "show",
				Usage:     "show one dead letter with its history and payload",
				ArgsUsage: "POLICY SEQ",
				Flags:     []cli.Flag{httpFlag},
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						return cli.Exit("usage: shaper dead show POLICY SEQ", 2)
					}
					var d json.RawMessage
					if _, err := call(c, http.MethodGet, "/v1/dead/"+url.PathEscape(c.Args().Get(0))+"/"+url.PathEscape(c.Args().Get(1)), &d); err != nil {
						return err
					}
					enc := json.NewEncoder(c.App.Writer)
					enc.SetIndent("", "  ")
					return enc.Encode(d)
				},
			},
			{
				Name:  "replay",
				Usage: "submit matching dead letters again through the normal admission path",
				Flags: filters,
				Action: func(c *cli.Context) error {
					return apply(c, http.MethodPost, "/v1/dead/replay?", "replayed")
				},
			},
			{
				Name:  "purge",
				Usage: "delete matching dead letters for good",
				Flags: append(filters, &cli.BoolFlag{Name: "all", Usage: "purge every policy's dead letters (needed without --policy)"}),
				Action: func(c *cli.Context) error {
					if c.String("policy") == "" && !c.Bool("all") {
						return cli.Exit("purge: name a --policy, or say --all", 2)
					}
					return apply(c, http.MethodDelete, "/v1/dead?", "purged")
				},
			},
		},
	}
}

func deadQuery(c *cli.Context) url.Values {
	q := url.Values{}
	for _, f := range []string{"policy", "key", "reason"} {
		if v := c.String(f); v != "" {
			q.Set(f, v)
		}
	}
	return q
}

func apply(c *cli.Context, method, path, verb string) error {
	var res struct {
		Matched int `json:"matched"`
		Done    int `json:"done"`
	}
	if _, err := call(c, method, path+deadQuery(c).Encode(), &res); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%d matched, %d %s\n", res.Matched, res.Done, verb)
	if res.Done < res.Matched {
		return cli.Exit(fmt.Sprintf("%d dead letters were not %s (see the shaper's log)", res.Matched-res.Done, verb), 1)
	}
	return nil
}

// call sends a request to the shaper's API and decodes a 2xx JSON answer
// into out; any other answer becomes an error with the problem's detail.
func call(c *cli.Context, method, path string, out any) ([]byte, error) {
	req, err := http.NewRequestWithContext(c.Context, method, "http://"+c.String("http")+path, nil)
	if err != nil {
		return nil, err
	}
	return send(req, out)
}

// send does req and decodes a 2xx JSON answer into out; any other answer
// becomes an error carrying the problem's detail.
func send(req *http.Request, out any) ([]byte, error) {
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w (is the shaper running? see --http)", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var p struct{ Detail string }
		json.Unmarshal(raw, &p)
		return nil, fmt.Errorf("%s: %s", resp.Status, p.Detail)
	}
	return raw, json.Unmarshal(raw, out)
}

// printable keeps a key or message on one table row.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 80 {
		s = string(r[:80]) + "…"
	}
	return s
}
