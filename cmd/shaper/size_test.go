package main

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1048576": 1 << 20, "4GiB": 4 << 30, "4g": 4 << 30, "512MB": 512e6, "1.5 GiB": 3 << 29, "64k": 64 << 10, "10 B": 10, "2TiB": 2 << 40,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, wantErr := range map[string]string{
		"":               "want a size",
		"GiB":            "want a size",
		"4 pages":        `unknown unit "pages"`,
		"1.2.3G":         "want a size",
		"1e30":           `unknown unit "e30"`,
		"9999999999999T": "too large",
		"-4G":            "want a positive size",
	} {
		if _, err := parseSize(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("parseSize(%q) = %v, want an error saying %q", in, err, wantErr)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4GiB", "512MB", "1.5g", "0", "", "x", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err == nil && n < 0 {
			t.Errorf("parseSize(%q) = %d, no error", s, n)
		}
	})
}
