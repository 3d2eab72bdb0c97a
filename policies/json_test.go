package policies

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestPolicyJSONRoundTrip(t *testing.T) {
	set, err := Parse("p.yaml", []byte(`
policies:
  - name: a
    outflow: 5/10s
    queue: 7
    overflow: defer
    total: 1/s
    deliver: {webhook: "http://127.0.0.1:1/h", timeout: 3s}
    retry: {attempts: 3, backoff: 250ms, max_backoff: 1m, deadline: 2h}
    admit: {algorithm: gcra, limit: 10/m, burst: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := set.Policies()[0]
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"outflow":"5/10s"`, `"backoff":"250ms"`, `"deadline":"2h0m0s"`, `"timeout":"3s"`, `"limit":"10/m"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("json.Marshal(policy) = %s, want it to contain %s", b, want)
		}
	}
	var back Policy
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("json.Unmarshal(%s) = %v", b, err)
	}
	back.Line = p.Line
	b2, _ := json.Marshal(back)
	if string(b2) != string(b) {
		t.Errorf("round trip:\n got %s\nwant %s", b2, b)
	}
	if err := back.Validate(); err != nil {
		t.Errorf("round-tripped policy does not validate: %v", err)
	}
}
