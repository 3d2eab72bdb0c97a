package policies_test

import (
	"fmt"

	"github.com/shaper-dev/shaper/policies"
)

func ExampleParse() {
	set, err := policies.Parse("policies.yaml", []byte(`
policies:
  - name: orders
    outflow: 20/s
    queue: 100
  - name: emails
    outflow: 5/s
    queue: 1000
    overflow: defer
    retry: {attempts: 5, deadline: 1h}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range set.Policies() {
		fmt.Printf("%s (line %d): %v per key, one every %v, queue %d, %s when full, to %s.<key>, %d attempts within %v\n",
			p.Name, p.Line, p.Outflow, p.Outflow.Interval(), p.Queue, p.Overflow, p.DeliverSubject(), p.Retry.Attempts, p.Retry.Deadline)
	}
	// Output:
	// orders (line 3): 20/s per key, one every 50ms, queue 100, reject when full, to shaper.out.orders.<key>, 10 attempts within 24h0m0s
	// emails (line 6): 5/s per key, one every 200ms, queue 1000, defer when full, to shaper.out.emails.<key>, 5 attempts within 1h0m0s
}

func ExampleParse_errors() {
	_, err := policies.Parse("policies.yaml", []byte(`
policies:
  - name: orders
    outflow: fast
    queue: 100
    overflw: defer
    retry: {attempts: 0}
`))
	fmt.Println(err)
	// Output:
	// policies.yaml:4: policy "orders": outflow: rate "fast": want N/s, N/m, N/h, N/d or N/<duration>
	// policies.yaml:6: policy "orders": unknown field "overflw" (did you mean "overflow"?)
	// policies.yaml:7:23: policy "orders": retry.attempts: 0: want at least 1
}

func ExamplePolicy_AdaptText() {
	set, err := policies.Parse("policies.yaml", []byte(`
policies:
  - {name: tenants, outflow: 50/s, queue: 1000, adapt: on}
  - {name: reports, outflow: 10/s, total: 50/s, queue: 100, adapt: {per: policy, floor: 5/s, latency: 300ms}}
  - {name: orders, outflow: 20/s, queue: 100}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range set.Policies() {
		fmt.Printf("%s: adapt %s\n", p.Name, p.AdaptText())
	}
	// Output:
	// tenants: adapt per key (default floor 5/s, latency target 1.5 × learned baseline)
	// reports: adapt per policy (floor 5/s, latency target 300ms)
	// orders: adapt off
}

func ExampleParseRate() {
	for _, s := range []string{"20/s", "0.5/s", "5/10s", "600/m", "1/d", "fast"} {
		r, err := policies.ParseRate(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s: one every %v, %g/s\n", r, r.Interval(), r.PerSecond())
	}
	// Output:
	// 20/s: one every 50ms, 20/s
	// 0.5/s: one every 2s, 0.5/s
	// 5/10s: one every 2s, 0.5/s
	// 600/m: one every 100ms, 10/s
	// 1/d: one every 24h0m0s, 1.1574074074074073e-05/s
	// rate "fast": want N/s, N/m, N/h, N/d or N/<duration>
}

func ExampleSet_With() {
	set, err := policies.Parse("policies.yaml", []byte("policies:\n  - {name: orders, outflow: 20/s, queue: 100}\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := set.Lookup("orders")
	p.Outflow, _ = policies.ParseRate("50/s")
	tuned, err := set.With(p)
	if err != nil {
		fmt.Println(err)
		return
	}
	now, _ := tuned.Lookup("orders")
	was, _ := set.Lookup("orders")
	fmt.Println("was", was.Outflow, "now", now.Outflow)

	p.Queue = 0
	_, err = set.With(p)
	fmt.Println(err)
	// Output:
	// was 20/s now 50/s
	// policy "orders": queue: 0: want a whole number from 1 to 1000000
}

func ExampleParseBudget() {
	for _, s := range []string{"20%", "0.05", "off", "150%"} {
		b, err := policies.ParseBudget(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s: %s, a share of %v\n", s, b, b.Share())
	}
	// Output:
	// 20%: 20%, a share of 0.2
	// 0.05: 5%, a share of 0.05
	// off: off, a share of 0
	// "150%": want a share above 0% and at most 100%, such as 20% or 0.2, or off
}
