// Package suggest says which known name a mistyped one was probably meant
// to be: the one helper behind every "did you mean" of the shaper, its
// policy files and its commands, so that they all match names by the same
// rule and word the hint the same way.
package suggest

import (
	"strconv"
	"strings"
)

// Hint returns ` (did you mean "x"?)` when got is close to exactly one
// name of known (Closest), and "" otherwise. A message ends with it, after
// the list of the names wanted when it gives one:
//
//	unknown field "qeue" (did you mean "queue"?)
//	overflow: "rejct": want "reject" or "defer" (did you mean "reject"?)
func Hint(got string, known []string) string {
	return hint(got, known, "")
}

// Closest returns the name of known that got was probably meant to be, and
// false when none is close or two are equally close. Names are compared
// without regard to case, "_", "-" and spaces ("Token-Bucket" is
// "token_bucket"); otherwise a name is close when got is at most one edit
// (an insertion, deletion or substitution of a byte, or the swap of two
// adjacent ones) from it, two when the name is longer than five bytes, or when the two differ only in their
// last letters, with at least three in common ("policy" and "policies",
// "max" and "max_backoff"). The nearest by edit distance wins.
func Closest(got string, known []string) (string, bool) {
	if got == "" {
		return "", false
	}
	g := strings.ToLower(got)
	best, bestDist, tie := "", -1, false
	for _, k := range known {
		if k == got {
			continue // not a mistake: nothing to suggest
		}
		l := strings.ToLower(k)
		d := -1
		if norm(l) == norm(g) {
			d = 0
		} else if limit := limitOf(k); sharePrefix(g, l) {
			d = editDistance(g, l, len(g)+len(l))
		} else if e := editDistance(g, l, limit+1); e <= limit {
			d = e
		}
		switch {
		case d < 0:
		case bestDist < 0 || d < bestDist:
			best, bestDist, tie = k, d, false
		case d == bestDist && k != best:
			tie = true
		}
	}
	if bestDist < 0 || tie {
		return "", false
	}
	return best, true
}

// limitOf is how many edits away from name a mistyped one may be: one in
// short names, two in longer ones.
func limitOf(name string) int {
	if len(name) > 5 {
		return 2
	}
	return 1
}

// norm is s without "_", "-" and spaces; s is lower case already.
func norm(s string) string {
	return strings.NewReplacer("_", "", "-", "", " ", "").Replace(s)
}

// editDistance is the number of edits that make a into b, an edit being
// the insertion, deletion or substitution of a byte or the swap of two
// adjacent ones (the optimal string alignment distance), or ceil when it
// is at least ceil.
func editDistance(a, b string, ceil int) int {
	if d := len(a) - len(b); d >= ceil || -d >= ceil {
		return ceil
	}
	older := make([]int, len(b)+1) // the row before prev, for swaps
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], older[j-2]+1)
			}
		}
		older, prev, cur = prev, cur, older
	}
	return min(prev[len(b)], ceil)
}

// sharePrefix reports whether a and b differ only in their last letters, as
// "policy" and "policies", or "max" and "max_backoff" do.
func sharePrefix(a, b string) bool {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n >= 3 && n >= min(len(a), len(b))-1
}

// FlagHint is Hint for a command-line flag: got and known are flag names
// without their dashes, and the hint gives the name with its two,
// ` (did you mean "--outflow"?)`.
func FlagHint(got string, known []string) string {
	return hint(got, known, "--")
}

// hint words the hint of Hint and FlagHint, the closest name shown after
// prefix.
func hint(got string, known []string, prefix string) string {
	if k, ok := Closest(got, known); ok {
		return " (did you mean " + strconv.Quote(prefix+k) + "?)"
	}
	return ""
}

// WantDuration is what a value that is not a duration is answered with:
// `want a duration such as 500ms, 90s, 5m or 24h`, and for a bare number
// ` (did you mean "5s"?)`, seconds being what a bare number most often
// means.
func WantDuration(got string) string {
	want := "want a duration such as 500ms, 90s, 5m or 24h"
	if n := strings.TrimSpace(got); n != "" {
		if _, err := strconv.ParseFloat(n, 64); err == nil {
			want += ` (did you mean "` + n + `s"?)`
		}
	}
	return want
}

// Per returns the unit of a rate ("s", "m", "h" or "d") that a unit spelt
// out or in another case means ("sec", "seconds", "Min", "S", "hour", …),
// and false for any other.
func Per(got string) (string, bool) {
	switch unit := strings.ToLower(strings.TrimSpace(got)); unit {
	case "s", "m", "h", "d": // "S": case does not count, as for every hint
		return unit, true
	case "sec", "secs", "second", "seconds":
		return "s", true
	case "min", "mins", "minute", "minutes":
		return "m", true
	case "hr", "hrs", "hour", "hours":
		return "h", true
	case "day", "days":
		return "d", true
	}
	return "", false
}
