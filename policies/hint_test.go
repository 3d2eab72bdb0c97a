package policies

import (
	"slices"
	"strings"
	"testing"
)

// An unknown field whose hint names a required field left out is one
// mistake: the hint says it, and "missing" is not said as well, in a
// policy, in a block, in JSON. A required field left out that no hint
// names is still missing, and a field given is still checked.
func TestHintNotMissing(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string // every line of the error
	}{
		{"outflow", "policies:\n  - name: a\n    outfow: 1/s\n    queue: 3\n",
			[]string{`p.yaml:3: policy "a": unknown field "outfow" (did you mean "outflow"?)`}},
		{"name", "policies:\n  - nme: a\n    outflow: 1/s\n    queue: 3\n",
			[]string{`p.yaml:2: unknown field "nme" (did you mean "name"?)`}},
		{"in a block", "policies:\n  - name: a\n    outflow: 1/s\n    queue: 3\n    admit: {algorithm: gcra, limt: 5/s}\n",
			[]string{`p.yaml:5:30: policy "a": admit: unknown field "limt" (did you mean "limit"?)`}},
		{"json", `{"policies": [{"name": "a", "outflw": "1/s", "queue": 3}]}`,
			[]string{`p.yaml:1:29: policy "a": unknown field "outflw" (did you mean "outflow"?)`}},
		{"another missing", "policies:\n  - name: a\n    outfow: 1/s\n",
			[]string{`p.yaml:2: policy "a": queue: missing: want a whole number from 1 to 1000000`,
				`p.yaml:3: policy "a": unknown field "outfow" (did you mean "outflow"?)`}},
		{"given too", "policies:\n  - name: a\n    outflow: fast\n    outfow: 1/s\n    queue: 3\n",
			[]string{`p.yaml:3: policy "a": outflow: rate "fast": want N/s, N/m, N/h, N/d or N/<duration>`,
				`p.yaml:4: policy "a": unknown field "outfow" (did you mean "outflow"?)`}},
		{"another policy", "policies:\n  - name: a\n    outfow: 1/s\n    queue: 3\n  - name: b\n    queue: 3\n",
			[]string{`p.yaml:3: policy "a": unknown field "outfow" (did you mean "outflow"?)`,
				`p.yaml:5: policy "b": outflow: missing: want a rate such as 20/s`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want %q", tt.in, tt.want)
			}
			if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, tt.want) {
				t.Errorf("Parse(%q) =\n%s\nwant\n%s", tt.in, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
