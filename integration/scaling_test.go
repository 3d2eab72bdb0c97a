package integration

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestScalingArithmetic recomputes the sizing table of docs/scaling.md
// from the units the page lists, and checks that each measured unit is the
// figure BENCHMARKS.md reports: the plan cannot drift from the
// measurements, nor the arithmetic from the plan.
func TestScalingArithmetic(t *testing.T) {
	page := readDoc(t, "../docs/scaling.md")
	bench := readDoc(t, "../BENCHMARKS.md")
	units := map[string]float64{}
	unitLine := regexp.MustCompile(`^unit (\w+) = ([0-9.]+)\s+# (BENCHMARKS|setting): ?(.*)$`)
	for _, line := range strings.Split(page, "\n") {
		m := unitLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("unit %s: %v", m[1], err)
		}
		units[m[1]] = v
		if m[3] != "BENCHMARKS" {
			continue
		}
		quote := strings.Trim(m[4], `"`)
		if !strings.Contains(bench, quote) {
			t.Errorf("unit %s quotes %q, which BENCHMARKS.md does not say", m[1], quote)
		}
		if !strings.Contains(strings.ReplaceAll(quote, ",", ""), m[2]) {
			t.Errorf("unit %s = %s, but the figure it quotes is %q", m[1], m[2], quote)
		}
	}
	for _, name := range []string{"paced_cpu_us", "stream_deliveries", "key_bytes", "shaper_cores", "shaper_memory_gb"} {
		if units[name] == 0 {
			t.Fatalf("docs/scaling.md lists no unit %s", name)
		}
	}
	perShaper := units["shaper_cores"] * 1e6 / units["paced_cpu_us"]
	forMemory := math.Ceil(1e7 * units["key_bytes"] / (units["shaper_memory_gb"] * 1e9))
	rows := 0
	for _, line := range strings.Split(page, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 5 || !strings.HasSuffix(strings.TrimSpace(cells[0]), "/s") {
			continue
		}
		rows++
		num := func(i int) float64 {
			v, err := strconv.ParseFloat(strings.NewReplacer(",", "", "/s", "").Replace(strings.TrimSpace(cells[i])), 64)
			if err != nil {
				t.Fatalf("row %q, cell %d: %v", line, i, err)
			}
			return v
		}
		target := num(0)
		want := []float64{target, math.Ceil(target / perShaper), math.Ceil(target / units["stream_deliveries"]), forMemory}
		want = append(want, max(want[1], want[3]))
		for i := 1; i < 5; i++ {
			if got := num(i); got != want[i] {
				t.Errorf("%v/s: column %d says %v, the units give %v", target, i, got, want[i])
			}
		}
	}
	if rows < 3 {
		t.Errorf("found %d rows of the sizing table, want 3 (10k, 100k, 1M deliveries/s)", rows)
	}
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
