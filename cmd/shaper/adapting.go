package main

import (
	"fmt"
	"io"

	"github.com/shaper-dev/shaper/shaper/client"
)

// showAdapting prints what p's adaptive outflow does now, as the shaper
// draining it says: "adapting orders: total 19.8/s of 50/s (latency 2.1×
// baseline (target 30ms))", then a line per deep key.
func showAdapting(w io.Writer, p client.Policy) {
	a := p.Adapting
	if a == nil {
		return
	}
	if st := a.Policy; st != nil {
		fmt.Fprintf(w, "adapting %s: total %.1f/s of %.4g/s (%s)\n", p.Name, st.Rate, st.Ceiling, st.Reason)
	}
	for _, k := range a.Keys {
		fmt.Fprintf(w, "adapting %s key %s (%d queued): %.1f/s of %.4g/s (%s)\n", p.Name, k.Key, k.Depth, k.Rate, k.Ceiling, k.Reason)
	}
}
