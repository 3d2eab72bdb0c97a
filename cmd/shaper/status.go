package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show every policy of a running shaper with its live figures",
		Description: `Counts are since the shaper started. DEFERRED counts the 429s that deferred
a job, DEF-QUEUED the deferred jobs waiting for re-admission now, DEAD the dead
letters kept; a * after the outflow marks a policy tuned live (shaper policies
reset NAME returns it to the policy file).
With --watch the table is redrawn in place on a terminal, and printed again
with a time stamp every --interval otherwise.`,
		Flags: append(apiFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print the raw JSON"},
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "refresh until interrupted"},
			&cli.DurationFlag{Name: "interval", Value: 2 * time.Second, Usage: "how often --watch refreshes"},
		),
		Action: func(c *cli.Context) error {
			api, err := apiClient(c, 5*time.Second)
			if err != nil {
				return err
			}
			if !c.Bool("watch") {
				if c.IsSet("interval") { // it would be ignored: say so
					return cli.Exit("shaper status: --interval is how often --watch refreshes: give --watch too", cmdline.ExitUsage)
				}
				return showStatus(c, api, c.App.Writer)
			}
			every := c.Duration("interval")
			if every <= 0 {
				return cli.Exit(fmt.Sprintf("shaper status: --interval %s: want a positive duration", every), cmdline.ExitUsage)
			}
			return watchStatus(c, api, every, cmdline.IsTerminal(c.App.Writer))
		},
	}
}

// showStatus prints every policy's figures once.
func showStatus(c *cli.Context, api *client.Client, w io.Writer) error {
	all, err := api.Policies(c.Context)
	if err != nil {
		return apiError(err, "status")
	}
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Policies []client.Policy `json:"policies"`
		}{all})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "POLICY\tOUTFLOW\tQUEUE\tKEYS\tQUEUED\tADMITTED\tREJECTED\tLIMITED\tDEFERRED\tDEF-QUEUED\tDELIVERED\tFAILED\tDEAD\t")
	var overridden []string
	for _, p := range all {
		name := p.Name // marked, not its outflow: the override may change any field
		if p.Override {
			name += "*"
			overridden = append(overridden, p.Name+" "+strings.Join(p.Overridden, ", "))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", name, p.Outflow, p.Queue, p.Keys, p.Queued,
			p.Admitted, p.Rejected, p.Limited, p.Deferred, p.DeferredQueued, p.Delivered, p.Failed, p.Dead)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(overridden) > 0 {
		fmt.Fprintf(w, "* tuned live, until reset (shaper policies reset NAME): %s\n", strings.Join(overridden, "; "))
	}
	for _, p := range all {
		if line := drainedBy(p); line != "" {
			if p.PartitionsInUse != 0 {
				line += fmt.Sprintf(" (in %d partitions; this shaper's file says %d: it stands by until they stop)", p.PartitionsInUse, p.Partitions)
			}
			fmt.Fprintf(w, "drainers of %s: %s\n", p.Name, line)
		}
	}
	for _, p := range all {
		if len(p.RestartPending) > 0 {
			who := "the shaper"
			if slices.ContainsFunc(p.RestartPending, func(c string) bool { return strings.HasPrefix(c, "partitions ") }) {
				who = "every shaper"
			}
			fmt.Fprintf(w, "restart pending: %s: the policy file, reloaded, changes %s, which apply only at a restart of %s\n",
				p.Name, strings.Join(p.RestartPending, ", "), who)
		}
	}
	for _, p := range all {
		if len(p.FileDiffersOn) > 0 {
			fmt.Fprintf(w, "policy files differ: %s is set otherwise on %s than here (the drainer paces its keys by its own file; give every shaper the same file and reload each)\n",
				p.Name, strings.Join(p.FileDiffersOn, ", "))
		}
	}
	// The figures come from memory: a shaper cut off from JetStream
	// answers them still, and says below why it accepts no job.
	var notReady *client.Error
	if err := api.Ready(c.Context); !errors.As(err, &notReady) {
		notReady = nil
	}
	// A drain that stores nothing delivers nothing, consumer or not.
	stopped := notReady != nil && strings.HasPrefix(notReady.Problem.Detail, shaper.NotStoring)
	for _, p := range all {
		switch {
		case p.WaitingForConsumer == nil:
		case stopped:
			fmt.Fprintf(w, "waiting for a consumer: %s since %s, and its drain delivers nothing until JetStream stores its lease renewals again (see not ready below): a consumer subscribing now gets nothing yet\n",
				p.Name, p.WaitingForConsumer.Local().Format("15:04:05"))
		default:
			fmt.Fprintf(w, "waiting for a consumer: %s since %s (nobody answers its deliveries on %s.>; its jobs stay queued until one subscribes, e.g. producer sink --subject '%s.>', with --nats-url set to the shaper's NATS server (its \"shaper serving\" log line names it) unless that is nats://127.0.0.1:4222)\n",
				p.Name, p.WaitingForConsumer.Local().Format("15:04:05"), p.Deliver.Subject, p.Deliver.Subject)
		}
	}
	for _, p := range all {
		if since := p.LimiterUnavailableSince; !since.IsZero() && p.Admit != nil {
			how := "it fails open: this shaper's share of the limit decides"
			if p.Admit.Fail == policies.FailClosed {
				how = "it fails closed: every submission is answered 503"
			}
			fmt.Fprintf(w, "admission limit of %s: its Redis fails since %s (%d decisions failed); %s\n",
				p.Name, since.Local().Format("15:04:05"), p.LimiterErrors, how)
		}
	}
	for _, p := range all {
		showAdapting(w, p)
	}
	if removed, err := api.Removed(c.Context); err == nil {
		for _, r := range removed {
			fmt.Fprintf(w, "removed with jobs left: %s (%d queued, %d deferred, since %s): they stay in JetStream, undelivered, until a policy file serves it again\n",
				r.Name, r.Queued, r.Deferred, r.At.Local().Format("15:04:05"))
		}
	}
	if notReady != nil {
		fmt.Fprintf(w, "not ready: %s\n", notReady.Problem.Detail)
	}
	return nil
}

// drainedBy says which shaper drains which partitions of p, as its
// drain leases say: "shaper-a (partitions 0 2 4), shaper-b (partitions
// 1 3)", or "nobody"; a drainer that missed a renewal of its lease (lost,
// or cut off from NATS) with "[no lease renewal for 3.4s]".
func drainedBy(p client.Policy) string {
	if len(p.Drainers) == 0 {
		return ""
	}
	var order []string
	parts := map[string][]string{}
	for i, who := range p.Drainers {
		if who == "" {
			who = "nobody"
		}
		if parts[who] == nil {
			order = append(order, who)
		}
		parts[who] = append(parts[who], strconv.Itoa(i))
	}
	out := make([]string, len(order))
	for i, who := range order {
		out[i] = who
		if len(p.Drainers) > 1 {
			out[i] += fmt.Sprintf(" (partitions %s)", strings.Join(parts[who], " "))
		}
		if ms, ok := p.DrainersUnrenewed[who]; ok {
			// Lost, or cut off: its lease ends a lease TTL after the last.
			out[i] += fmt.Sprintf(" [no lease renewal for %.1fs]", float64(ms)/1000)
		}
	}
	return strings.Join(out, ", ")
}

// watchStatus shows the status every interval until the command is
// interrupted: redrawn in place on a terminal, as time-stamped blocks
// otherwise. A failed refresh is shown and retried.
func watchStatus(c *cli.Context, api *client.Client, every time.Duration, tty bool) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		var b bytes.Buffer
		err := showStatus(c, api, &b)
		if c.Context.Err() != nil {
			return nil
		}
		stamp := time.Now().Format("15:04:05")
		if tty {
			fmt.Fprintf(c.App.Writer, "\033[H\033[2J%s  every %s, Ctrl-C stops\n\n", stamp, every)
		} else {
			fmt.Fprintf(c.App.Writer, "--- %s\n", stamp)
		}
		if err != nil {
			fmt.Fprintln(c.App.Writer, err)
		}
		c.App.Writer.Write(b.Bytes())
		select {
		case <-c.Context.Done():
			return nil
		case <-tick.C:
		}
	}
}
