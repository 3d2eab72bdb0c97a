package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
)

// showPolicy prints a policy as it runs, or as a change or reset left
// it: its line as policies check prints it (with adapt, concurrency and
// where it delivers), the live override's fields, and its retry and
// admit blocks when a live override touches them, or always with every
// (policies get).
func showPolicy(c *cli.Context, p client.Policy, every bool) {
	w := c.App.Writer
	pol := p.Policy
	pol.Partitions = p.Partitions // the API says it beside the policy
	fmt.Fprint(w, checkLine(pol))
	if p.Override {
		fmt.Fprint(w, " (live override")
		if len(p.Overridden) > 0 {
			fmt.Fprint(w, ": ", strings.Join(p.Overridden, ", "))
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintln(w)
	var retry, admit, adapt, concurrency bool
	for _, f := range p.Overridden {
		retry = retry || strings.HasPrefix(f, "retry")
		admit = admit || strings.HasPrefix(f, "admit")
		adapt = adapt || strings.HasPrefix(f, "adapt")
		concurrency = concurrency || strings.HasPrefix(f, "concurrency")
	}
	if r := p.Retry; retry || every {
		fmt.Fprintf(w, "  retry: attempts %d, backoff %v, max_backoff %v, deadline %v, budget %s\n", r.Attempts, r.Backoff, r.MaxBackoff, r.Deadline, r.Budget)
	}
	if a := p.Admit; admit && a == nil {
		fmt.Fprintln(w, "  admit: off")
	} else if a != nil && (admit || every) {
		fmt.Fprintf(w, "  admit: %s %s, burst %d, shadow %v, fail %s\n", a.Algorithm, a.Limit, a.Burst, a.Shadow, a.Fail)
	}
	// The line shows adapt and concurrency unless they are off or the
	// default: say so when an override made them that.
	if adapt && p.Adapt == nil {
		fmt.Fprintln(w, "  adapt: off")
	}
	if c := p.Concurrency; concurrency && c.Key <= policies.DefaultConcurrencyKey && c.Total == 0 {
		fmt.Fprintf(w, "  concurrency: key %d, total none\n", c.Key)
	}
}

// fieldFlag is a flag of policies set that sets the field at path, of
// kind "text", "int" or "bool": its value is read as the policy file
// reads it.
type fieldFlag struct{ flag, path, kind, usage string }

// fieldFlags are the flags of policies set, in the policy file's order.
var fieldFlags = []fieldFlag{
	{"outflow", "outflow", "text", "per-key rate, e.g. 20/s"},
	{"queue", "queue", "int", "jobs a key may hold"},
	{"overflow", "overflow", "text", "reject or defer"},
	{"total", "total", "text", `outflow cap over all keys ("" or off removes it)`},
	{"retry-attempts", "retry.attempts", "int", "how many times a job is tried at most"},
	{"retry-backoff", "retry.backoff", "text", "first retry delay, e.g. 1s"},
	{"retry-max-backoff", "retry.max_backoff", "text", "retry delay cap, e.g. 1m"},
	{"retry-deadline", "retry.deadline", "text", "how long after its submission a job may be retried, e.g. 24h"},
	{"retry-budget", "retry.budget", "text", "share of a key's slots retries may take: 20%, 0.2 or off"},
	{"admit", "admit", "text", "off: no admission limit, whatever the file says"},
	{"admit-algorithm", "admit.algorithm", "text", "gcra, token_bucket, fixed_window, sliding_log or sliding_window"},
	{"admit-limit", "admit.limit", "text", "admission limit per key, e.g. 600/m"},
	{"admit-burst", "admit.burst", "int", "bucket size of gcra and token_bucket"},
	{"admit-shadow", "admit.shadow", "bool", "only count what the limit would refuse"},
	{"admit-fail", "admit.fail", "text", "open or closed: what to do when Redis fails"},
	{"adapt", "adapt", "text", "on or off: the adaptive outflow, whatever the file says (on keeps the file's adapt fields)"},
	{"adapt-per", "adapt.per", "text", "key or policy: what adapts, each key's outflow or the total"},
	{"adapt-floor", "adapt.floor", "text", "lowest rate the outflow adapts down to, e.g. 2/s"},
	{"adapt-latency", "adapt.latency", "text", "target delivery latency, e.g. 200ms (none: the learned baseline × tolerance)"},
	{"adapt-tolerance", "adapt.tolerance", "float", "times the learned baseline latency may reach, e.g. 1.5"},
	{"concurrency-key", "concurrency.key", "int", "deliveries of one key awaiting their receipt at once"},
	{"concurrency-total", "concurrency.total", "int", "deliveries of the whole policy awaiting their receipt at once"},
}

// policyChange is the change the flags of policies set ask for, and
// whether they ask for any: the flags make a JSON merge patch, read by
// policies.ParsePatch as the shaper reads a PUT.
func policyChange(c *cli.Context) (client.PolicyChange, bool, error) {
	body := map[string]any{}
	put := func(path, flag string, v any) error {
		m := body
		parts := strings.Split(path, ".")
		for _, p := range parts[:len(parts)-1] {
			switch sub := m[p].(type) {
			case map[string]any:
				m = sub
			case nil:
				if _, reset := m[p]; reset {
					return fmt.Errorf("%s: %s is reset: it cannot be changed too", flag, p)
				}
				block := map[string]any{}
				m[p], m = block, block
			case string:
				if sub == "on" {
					// --adapt on with fields of adapt: the fields turn it
					// on, keeping the file's others, as on alone does.
					block := map[string]any{}
					m[p], m = block, block
					continue
				}
				return fmt.Errorf("%s: %s is %s by another flag, which leaves none of its fields to change", flag, p, sub)
			default:
				return fmt.Errorf("%s: %s is %v: it cannot be changed too", flag, p, sub)
			}
		}
		last := parts[len(parts)-1]
		if _, twice := m[last]; twice {
			return fmt.Errorf("%s: %s is already changed by another flag", flag, path)
		}
		m[last] = v
		return nil
	}
	for _, f := range fieldFlags {
		if !c.IsSet(f.flag) {
			continue
		}
		var v any
		switch f.kind {
		case "int":
			v = c.Int(f.flag)
		case "bool":
			v = c.Bool(f.flag)
		case "float":
			v = c.Float64(f.flag)
		default:
			v = c.String(f.flag)
		}
		if err := put(f.path, "--"+f.flag, v); err != nil {
			return client.PolicyChange{}, false, err
		}
	}
	for _, path := range c.StringSlice("reset") {
		for path := range strings.SplitSeq(path, ",") {
			if err := put(strings.TrimSpace(path), "--reset", nil); err != nil {
				return client.PolicyChange{}, false, err
			}
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return client.PolicyChange{}, false, err
	}
	change, err := policies.ParsePatch(b)
	if err != nil {
		// Worded as the shaper words the same change refused (policy "name": field: what).
		return client.PolicyChange{}, false, policies.Named(c.Args().First(), err)
	}
	return change, len(body) > 0, nil
}

// setFlags are the flags of policies set.
func setFlags() []cli.Flag {
	flags := apiFlags()
	for _, f := range fieldFlags {
		switch f.kind {
		case "int":
			flags = append(flags, &cli.IntFlag{Name: f.flag, Usage: f.usage, DefaultText: "unchanged"})
		case "bool":
			flags = append(flags, &cli.BoolFlag{Name: f.flag, Usage: f.usage, DefaultText: "unchanged"})
		case "float":
			flags = append(flags, &cli.Float64Flag{Name: f.flag, Usage: f.usage, DefaultText: "unchanged"})
		default:
			flags = append(flags, &cli.StringFlag{Name: f.flag, Usage: f.usage, DefaultText: "unchanged"})
		}
	}
	return append(flags, &cli.StringSliceFlag{Name: "reset", Usage: "take `FIELD` back to the policy file's value (total, retry.attempts, retry, admit, …)"},
		// Fields that change only in the policy file: a flag of their name
		// says so, not that there is no such flag.
		&cli.StringFlag{Name: "partitions", Hidden: true}, &cli.StringFlag{Name: "deliver", Hidden: true})
}

// fileOnly refuses the hidden flags of policy fields that change only in
// the policy file, with every shaper restarted.
func fileOnly(c *cli.Context) error {
	for _, f := range []string{"partitions", "deliver"} {
		if c.IsSet(f) {
			return fmt.Errorf("--%s: %s cannot change while running: edit the policy file and restart the shapers", f, f)
		}
	}
	return nil
}

// newAdmitNeeds refuses a change of some --admit-… fields of a policy that
// has no admission limit, for a new limit needs its algorithm and its
// limit: the shaper would name the missing fields of the policy file
// (admit.limit: missing), not the flags that give them.
func newAdmitNeeds(c *cli.Context, api *client.Client, name string, change client.PolicyChange) error {
	a, ok := change.Admit.Get()
	if !ok || a.Off {
		return nil
	}
	var missing []string
	if _, ok := a.Algorithm.Get(); !ok {
		missing = append(missing, "--admit-algorithm")
	}
	if _, ok := a.Limit.Get(); !ok {
		missing = append(missing, "--admit-limit")
	}
	if len(missing) == 0 {
		return nil
	}
	running, err := api.Policy(c.Context, name)
	if err != nil {
		return apiError(err, "policies set")
	}
	if running.Admit != nil {
		return nil
	}
	return cli.Exit(fmt.Sprintf("shaper policies set: policy %q has no admission limit to change: a new one needs --admit-algorithm and --admit-limit (missing: %s)",
		name, strings.Join(missing, " and ")), cmdline.ExitUsage)
}

func policiesCommand() *cli.Command {
	return &cli.Command{
		Name:  "policies",
		Usage: "check policy files; tune a running shaper's policies",
		Subcommands: []*cli.Command{{
			Name:      "get",
			Usage:     "show a running shaper's policies as they run: the file's values and the live changes",
			ArgsUsage: "[NAME]",
			Flags:     apiFlags(),
			Action:    getPolicies,
		}, {
			Name:      "set",
			Usage:     "tune a policy of running shapers live (kept as an override until reset)",
			ArgsUsage: "NAME",
			Description: "Each flag changes one field of the policy and no other; --reset FIELD (such as total,\n" +
				"retry.attempts, retry or admit; repeatable) takes a field back to the policy file's value.\n" +
				"Values are written as in the policy file.",
			Flags: setFlags(),
			Action: func(c *cli.Context) error {
				if err := cmdline.Args(c, "shaper policies set NAME [--outflow R] [--queue N] [--total R|off] [--overflow reject|defer] [--retry-… V] [--admit-… V] [--adapt on|off] [--adapt-… V] [--reset FIELD]", "NAME"); err != nil {
					return err
				}
				change, ok, err := policyChange(c)
				if err == nil {
					err = fileOnly(c)
				}
				if err != nil {
					return cli.Exit("shaper policies set: "+err.Error(), cmdline.ExitUsage)
				}
				if !ok {
					return cli.Exit("shaper policies set: nothing to change (give --outflow, --queue, --total, --overflow, a --retry-…, --admit-…, --concurrency-… or --adapt… flag, or --reset FIELD)", cmdline.ExitUsage)
				}
				api, err := apiClient(c, time.Minute)
				if err != nil {
					return err
				}
				if err := newAdmitNeeds(c, api, c.Args().First(), change); err != nil {
					return err
				}
				p, err := api.SetPolicy(c.Context, c.Args().First(), change)
				if err != nil {
					return apiError(err, "policies set")
				}
				showPolicy(c, p, false)
				return nil
			},
		}, {
			Name:      "reset",
			Usage:     "drop a policy's live override: back to the policy file",
			ArgsUsage: "NAME",
			Flags:     apiFlags(),
			Action: func(c *cli.Context) error {
				if err := cmdline.Args(c, "shaper policies reset NAME", "NAME"); err != nil {
					return err
				}
				api, err := apiClient(c, time.Minute)
				if err != nil {
					return err
				}
				p, err := api.ResetPolicy(c.Context, c.Args().First())
				if err != nil {
					return apiError(err, "policies reset")
				}
				fmt.Fprintf(c.App.Writer, "%s: back to the policy file, no live change kept\n", p.Name)
				showPolicy(c, p, false)
				return nil
			},
		}, {
			Name:      "check",
			Usage:     "validate a policy file; exit 2 naming the line of every error",
			ArgsUsage: "FILE",
			Action: func(c *cli.Context) error {
				if err := cmdline.Args(c, "shaper policies check FILE", "FILE"); err != nil {
					return err
				}
				set, err := policies.Load(c.Args().First())
				if err != nil {
					return cli.Exit(err.Error(), exitBadPolicies)
				}
				for _, p := range set.Policies() {
					fmt.Fprintln(c.App.Writer, checkLine(p))
				}
				fmt.Fprintf(c.App.Writer, "%s: %s OK\n", c.Args().First(), policiesCount(len(set.Policies())))
				return nil
			},
		}},
	}
}

// getPolicies shows policy NAME of the running shaper, or all of them, as
// policies set shows what it changed.
func getPolicies(c *cli.Context) error {
	if c.NArg() > 1 {
		return cmdline.Args(c, "shaper policies get [NAME]", "NAME")
	}
	api, err := apiClient(c, 10*time.Second)
	if err != nil {
		return err
	}
	var all []client.Policy
	if name := c.Args().First(); name != "" {
		p, err := api.Policy(c.Context, name)
		if err != nil {
			return apiError(err, "policies get")
		}
		all = append(all, p)
	} else if all, err = api.Policies(c.Context); err != nil {
		return apiError(err, "policies get")
	}
	for _, p := range all {
		showPolicy(c, p, true)
	}
	return nil
}

// checkLine is policy p in a line, as policies check prints it: the
// fields every policy has, and those of the others that p sets
// (partitions, adapt and concurrency only when not the default; adapt
// with every field, in the words of policies.Policy.AdaptText).
func checkLine(p policies.Policy) string {
	line := fmt.Sprintf("%s: outflow %s per key, queue %d, overflow %s", p.Name, p.Outflow, p.Queue, p.Overflow)
	if !p.Total.IsZero() {
		line += ", total " + p.Total.String()
	}
	if n := p.Parts(); n > 1 {
		line += fmt.Sprintf(", %d partitions", n)
	}
	if p.Adapt != nil {
		line += ", adapt " + p.AdaptText() // as policies set shows it
	}
	if c := p.Concurrency; c.Key > policies.DefaultConcurrencyKey || c.Total > 0 {
		line += fmt.Sprintf(", %d awaiting receipt per key", c.Key)
		if c.Total > 0 {
			line += fmt.Sprintf(" (%d in all)", c.Total)
		}
	}
	if p.Deliver.Webhook != "" {
		return line + ", webhook " + p.Deliver.Webhook
	}
	line += ", deliver " + p.DeliverSubject() + ".<key>"
	switch {
	case p.Deliver.Stream != "":
		line += " into stream " + p.Deliver.Stream
	case p.Deliver.Mode == policies.DeliverPublish:
		line += " (publish, at most once)"
	}
	return line
}

// policiesCount says n policies: "1 policy", "3 policies".
func policiesCount(n int) string {
	if n == 1 {
		return "1 policy"
	}
	return strconv.Itoa(n) + " policies"
}
