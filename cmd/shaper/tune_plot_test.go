package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/replay"
)

// candidate is a replay's result with the figures the plot draws.
func candidate(t *testing.T, outflow string, queue int, rejected uint64, p99 time.Duration) replay.Result {
	t.Helper()
	rate, err := policies.ParseRate(outflow)
	if err != nil {
		t.Fatal(err)
	}
	return replay.Result{Policy: policies.Policy{Name: "orders", Outflow: rate, Queue: queue},
		Submitted: 1000, Accepted: 1000 - rejected, Rejected: rejected, Wait: replay.Wait{P99: p99}, Span: 10 * time.Second}
}

// polylineXs returns the x coordinates of every polyline of svg.
func polylineXs(t *testing.T, svg string) []float64 {
	t.Helper()
	var xs []float64
	for _, m := range regexp.MustCompile(`<polyline points="([^"]*)"`).FindAllStringSubmatch(svg, -1) {
		for pt := range strings.FieldsSeq(m[1]) {
			x, err := strconv.ParseFloat(strings.Split(pt, ",")[0], 64)
			if err != nil {
				t.Fatalf("polyline point %q: %v", pt, err)
			}
			xs = append(xs, x)
		}
	}
	return xs
}

// The time axis spans the trace, from its start to its last submission,
// though the queues drain after it: nothing is drawn past its end, and the
// plot says how long they took.
func TestPlotTimeAxisEndsWithTheTrace(t *testing.T) {
	series := &replay.Series{Step: time.Second}
	for i := range 15 { // the last submission at 10 s, the queues drained by 15 s
		series.Points = append(series.Points, replay.Point{Queued: int64(15 - i), Deliveries: 1, WaitSum: time.Second, WaitMax: time.Second})
	}
	cur := candidate(t, "10/s", 100, 0, time.Second)
	cur.Series = series
	r := &tuneReport{Trace: "t.csv", Policy: "orders", Results: []replay.Result{cur}, Choice: replay.Choice{Best: -1}}
	lines, _ := timeLines(r)
	depth, wait := timePanels(r, lines)
	var doc svgDoc
	depth.frame(&doc, "depth")
	wait.frame(&doc, "wait")
	if depth.xMax != 10 || wait.xMax != 10 {
		t.Errorf("time axes end at %gs and %gs, want the trace's end, 10s", depth.xMax, wait.xMax)
	}
	svg := plotSVG(r)
	xs := polylineXs(t, svg)
	if len(xs) == 0 {
		t.Fatal("no polyline drawn")
	}
	for _, x := range xs {
		if x > plotRight+0.05 {
			t.Errorf("a point drawn at x %.1f, past the axis's end at %.1f", x, plotRight)
		}
	}
	if !strings.Contains(svg, ">the queues drained 5s</text>") {
		t.Error("the plot does not say how long the queues drained after the trace")
	}
}

// Candidates that decide alike share one label; labels of different lines
// at one place are set apart, never over each other.
func TestPlotLabelsApart(t *testing.T) {
	results := []replay.Result{
		candidate(t, "10/s", 50, 300, 5*time.Second),
		candidate(t, "10/s", 100, 100, 10*time.Second),
		candidate(t, "10/s", 200, 100, 10*time.Second), // = queue 100
		candidate(t, "20/s", 50, 100, 10*time.Second),  // where 10/s meets it
		candidate(t, "20/s", 100, 0, 3*time.Second),
		candidate(t, "40/s", 50, 0, 3*time.Second), // = 20/s, queue 100
		candidate(t, "40/s", 100, 0, 3*time.Second),
	}
	r := &tuneReport{Trace: "t.csv", Policy: "orders", Current: 1, Results: results,
		Targets: replay.Targets{MaxWait: 4 * time.Second}, Choice: replay.Choice{Best: 4}}
	svg := plotSVG(r)
	re := regexp.MustCompile(`<text x="([0-9.]+)" y="([0-9.]+)" text-anchor="start" font-size="10" fill="[^"]*">(q [^<]*)</text>`)
	var boxes []box
	var texts []string
	for _, m := range re.FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		boxes = append(boxes, labelBox(x, y, m[3]))
		texts = append(texts, m[3])
	}
	want := []string{"q 50", "q 100, 200", "q 50", "q 100", "q 50, 100"}
	if strings.Join(texts, "|") != strings.Join(want, "|") {
		t.Errorf("labels %q, want %q", texts, want)
	}
	for i := range boxes {
		for j := range i {
			if boxes[i].overlaps(boxes[j]) {
				t.Errorf("label %q at %v overlaps %q at %v", texts[i], boxes[i], texts[j], boxes[j])
			}
		}
	}
	// The rings of the current and the recommended candidate differ in
	// size, so that both show where they meet.
	if !strings.Contains(svg, `r="8" fill="none" stroke="`+plotColors[0]) || !strings.Contains(svg, `r="11" fill="none" stroke="`+plotColors[1]) {
		t.Error("the current and the recommended candidate are not ringed apart")
	}
}
