package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the units parseSize reads, by their lower-case spelling.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1e3, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1e6, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1e9, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1e12, "tib": 1 << 40,
}

// parseSize reads a size in bytes: a number with an optional unit, "4GiB",
// "512MB", "1.5g", "1048576" (K, M, G and T alone are binary, as in
// nats-server's configuration).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("%q: want a positive size such as 4GiB or 512MB", s)
	}
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q: want B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB)", s, unit)
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("%q: want a size such as 4GiB or 512MB", s)
	}
	b := n * mult
	if b >= math.MaxInt64 || math.IsInf(b, 0) || math.IsNaN(b) {
		return 0, fmt.Errorf("%q: too large", s)
	}
	return int64(b), nil
}
