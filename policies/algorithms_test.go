package policies

import (
	"os"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/limiter"
)

// The admission algorithms are one list, limiter.Algorithms: the validator
// accepts exactly those, and every document that lists them names them all.
func TestAlgorithmNamesAgree(t *testing.T) {
	for _, a := range limiter.Algorithms {
		yaml := "policies:\n  - name: p\n    outflow: 1/s\n    queue: 1\n    admit: {algorithm: " + string(a) + ", limit: 10/s}\n"
		if _, err := Parse("p.yaml", []byte(yaml)); err != nil {
			t.Errorf("Parse with algorithm %s = %v, want nil", a, err)
		}
		if _, err := limiter.ParseAlgorithm(string(a)); err != nil {
			t.Errorf("limiter.ParseAlgorithm(%q) = %v", a, err)
		}
	}
	bad := "policies:\n  - name: p\n    outflow: 1/s\n    queue: 1\n    admit: {algorithm: leaky_bucket, limit: 10/s}\n"
	if _, err := Parse("p.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), strings.Join(algorithms, ", ")) {
		t.Errorf("Parse with an unknown algorithm = %v, want an error listing %v", err, algorithms)
	}
	for _, doc := range []string{"doc.go", "../limiter/doc.go", "../docs/policies.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range limiter.Algorithms {
			if !strings.Contains(string(b), string(a)) {
				t.Errorf("%s does not name the algorithm %s", doc, a)
			}
		}
	}
}
