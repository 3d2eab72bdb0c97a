package shaper_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// A policy with an adapt block shows its effective rate and why: per key
// for its deepest keys, per policy for its total, in GET /v1/policies and
// in /metrics (shaper_adapt_rate).
func TestAdaptingShown(t *testing.T) {
	r := start(t, `
policies:
  - name: tenants
    outflow: 5/s
    queue: 100
    adapt: {per: key}
  - name: shared
    outflow: 5/s
    total: 8/s
    queue: 100
    adapt: {per: policy, floor: 2/s}
  - name: fixed
    outflow: 5/s
    queue: 100
`)
	wait := collect(t, r.nc, "shaper.out.>")
	for _, policy := range []string{"tenants", "shared", "fixed"} {
		for i := range 20 {
			if a := r.post(t, policy, "k", []byte(fmt.Sprint(i))); a.code != http.StatusAccepted {
				t.Fatalf("POST %s = %d %v", policy, a.code, a.body)
			}
		}
	}
	wait(6, 10*time.Second) // the first deliveries of each: "k" still has a backlog
	tenants := r.get(t, "/v1/policies/tenants")
	adapting, _ := tenants["adapting"].(map[string]any)
	keys, _ := adapting["keys"].([]any)
	if len(keys) != 1 {
		t.Fatalf("GET /v1/policies/tenants: adapting %v, want the key k", tenants["adapting"])
	}
	k := keys[0].(map[string]any)
	reason, _ := k["reason"].(map[string]any)
	if k["key"] != "k" || k["rate"] != 5.0 || k["ceiling"] != 5.0 || reason["kind"] != "at_ceiling" || reason["text"] != "at ceiling" {
		t.Errorf("adapting key %v, want k at its 5/s ceiling, at ceiling", k)
	}
	shared := r.get(t, "/v1/policies/shared")
	policy, _ := shared["adapting"].(map[string]any)["policy"].(map[string]any)
	if policy["rate"] != 8.0 || policy["floor"] != 2.0 {
		t.Errorf("GET /v1/policies/shared: adapting %v, want the total's 8/s, floor 2/s", shared["adapting"])
	}
	if fixed := r.get(t, "/v1/policies/fixed"); fixed["adapting"] != nil {
		t.Errorf("a policy without adapt shows adapting %v", fixed["adapting"])
	}
	families := scrape(t, r.base)
	if m := series(families, "shaper_adapt_rate", map[string]string{"policy": "tenants", "key": "k", "reason": "at_ceiling"}); m.GetGauge().GetValue() != 5 {
		t.Errorf("shaper_adapt_rate{policy=tenants,key=k} = %v, want 5", m)
	}
	if m := series(families, "shaper_adapt_rate", map[string]string{"policy": "shared"}); m.GetGauge().GetValue() != 8 {
		t.Errorf("shaper_adapt_rate{policy=shared} = %v, want 8", m)
	}
	if m := series(families, "shaper_adapt_rate", map[string]string{"policy": "fixed"}); m != nil {
		t.Errorf("shaper_adapt_rate of a fixed policy: %v", m)
	}
}
