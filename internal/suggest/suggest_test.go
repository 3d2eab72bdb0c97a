package suggest

import "testing"

func TestHint(t *testing.T) {
	fields := []string{"name", "outflow", "queue", "overflow", "total", "partitions", "deliver", "retry", "admit", "adapt", "concurrency"}
	for _, tc := range []struct {
		got   string
		known []string
		want  string
	}{
		{"qeue", fields, `"queue"`},
		{"outfow", fields, `"outflow"`},
		{"Queue", fields, `"queue"`},                                         // case
		{"token-bucket", []string{"gcra", "token_bucket"}, `"token_bucket"`}, // _ and -
		{"tokenbucket", []string{"gcra", "token_bucket"}, `"token_bucket"`},
		{"policy", []string{"policies"}, `"policies"`}, // the last letters
		{"keys", []string{"key", "total"}, `"key"`},
		{"max", []string{"attempts", "max_backoff"}, `"max_backoff"`},
		{"rejct", []string{"reject", "defer"}, `"reject"`},
		{"polcy", []string{"key", "policy"}, `"policy"`},
		{"onn", []string{"on", "off"}, `"on"`},
		{"kye", []string{"off", "key", "policy"}, `"key"`}, // a swap is one edit
		{"plociy", []string{"key", "policy"}, `"policy"`},
		{"ordrs", []string{"orders", "reports", "tenants"}, `"orders"`},
		{"Orders", []string{"orders", "reports"}, `"orders"`},
		{"of", []string{"on", "off"}, ""},                          // as near to both: no guess
		{"tenant", []string{"tenants", "tenantz"}, ""},             // as near to both
		{"tenant", []string{"tenants", "tenants-eu"}, `"tenants"`}, // the nearest
		{"colour", fields, ""},
		{"", []string{"a"}, ""},
		{"xyz", nil, ""},
		{"queue", fields, ""}, // known: nothing to suggest
	} {
		want := ""
		if tc.want != "" {
			want = " (did you mean " + tc.want + "?)"
		}
		if got := Hint(tc.got, tc.known); got != want {
			t.Errorf("Hint(%q, %q) = %q, want %q", tc.got, tc.known, got, want)
		}
	}
}

func TestWantDurationAndPer(t *testing.T) {
	for got, want := range map[string]string{
		"5":    `want a duration such as 500ms, 90s, 5m or 24h (did you mean "5s"?)`,
		" 1.5": `want a duration such as 500ms, 90s, 5m or 24h (did you mean "1.5s"?)`,
		"5 s":  "want a duration such as 500ms, 90s, 5m or 24h",
		"":     "want a duration such as 500ms, 90s, 5m or 24h",
	} {
		if s := WantDuration(got); s != want {
			t.Errorf("WantDuration(%q) = %q, want %q", got, s, want)
		}
	}
	for got, want := range map[string]string{"sec": "s", "Seconds": "s", "min": "m", "hours": "h", "day": "d", "ms": "", "x": ""} {
		if unit, ok := Per(got); unit != want || ok != (want != "") {
			t.Errorf("Per(%q) = %q, %v; want %q", got, unit, ok, want)
		}
	}
}
