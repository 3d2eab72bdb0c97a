package benchkit

import (
	"fmt"
	"io"
	"strings"
)

// TableRow writes cells as one line of a Markdown table.
func TableRow(w io.Writer, cells ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

// TableRule writes the line under a Markdown table's header: a column
// each, its alignment "---" or, for figures, "---:".
func TableRule(w io.Writer, aligns ...string) {
	var b strings.Builder
	b.WriteString("|")
	for _, a := range aligns {
		b.WriteString(" " + a + " |")
	}
	fmt.Fprintln(w, b.String())
}

// Thousands formats v rounded to a whole number with commas: 36,300.
func Thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Met says whether a target is met.
func Met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
