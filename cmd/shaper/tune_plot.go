package main

import (
	"cmp"
	"errors"
	"fmt"
	"html"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/shaper/replay"
)

// writePlot draws the report into an SVG file: queue depth and time in
// queue over the trace for the current and the recommended policy, and the
// trade-off between rejections and wait over every candidate.
func writePlot(path string, r *tuneReport) error {
	if err := plotWritable(path); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(plotSVG(r)), 0o644)
}

// plotWritable says what stops writing the plot to path (nil: nothing): a
// name that is not *.svg, a directory that is not there or not writable,
// a directory of that name. It writes nothing at path itself.
func plotWritable(path string) error {
	if !strings.EqualFold(filepath.Ext(path), ".svg") {
		return fmt.Errorf("%s: the plot is an SVG file: name it *.svg", path)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s: a directory of that name is there", path)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s: no directory %s", path, dir)
	}
	f, err := os.CreateTemp(dir, ".tune-*.svg")
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("%s: cannot write in %s: permission denied", path, dir)
		}
		return fmt.Errorf("%s: cannot write in %s: %w", path, dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// The plot's geometry, in SVG user units.
const (
	plotWidth  = 1120
	panelTop   = 75.0
	panelH     = 230.0
	panelGap   = 80.0
	plotLeft   = 80.0
	plotRight  = 800.0
	legendLeft = 820.0
)

// plotColors tell the current policy from the recommended one, and the
// candidates' outflows apart.
var plotColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

type svgDoc struct{ b strings.Builder }

func (s *svgDoc) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func (s *svgDoc) text(x, y float64, anchor, size, body string) {
	s.printf(`<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%s">%s</text>`+"\n", x, y, anchor, size, html.EscapeString(body))
}

// panel is one chart: a box on the page and the ranges it shows.
type panel struct {
	top          float64
	xMax, yMax   float64
	xTime, yTime bool // the axis shows seconds: ticks at round durations
	xExact       bool // the x axis ends at xMax, not at the next whole tick
	xFmt, yFmt   func(float64) string
	xName, yName string
	xStep, yStep float64
}

func (p *panel) x(v float64) float64 { return plotLeft + (plotRight-plotLeft)*v/p.xMax }
func (p *panel) y(v float64) float64 { return p.top + panelH - panelH*v/p.yMax }

// frame rounds the panel's ranges up to whole ticks and draws its title,
// axes, grid and tick labels.
func (p *panel) frame(s *svgDoc, title string) {
	if end, step := axis(p.xMax, p.xTime); p.xExact && p.xMax > 0 {
		p.xStep = step
	} else {
		p.xMax, p.xStep = end, step
	}
	p.yMax, p.yStep = axis(p.yMax*1.05, p.yTime)
	s.text(plotLeft, p.top-12, "start", "14", title)
	s.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", plotLeft, p.top, plotRight-plotLeft, panelH)
	for v := 0.0; v <= p.xMax*1.0001; v += p.xStep {
		x := p.x(v)
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, p.top, x, p.top+panelH)
		s.text(x, p.top+panelH+15, "middle", "11", p.xFmt(v))
	}
	for v := 0.0; v <= p.yMax*1.0001; v += p.yStep {
		y := p.y(v)
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", plotLeft, y, plotRight, y)
		s.text(plotLeft-6, y+4, "end", "11", p.yFmt(v))
	}
	s.text((plotLeft+plotRight)/2, p.top+panelH+32, "middle", "12", p.xName)
	s.printf(`<text x="20" y="%.1f" font-size="12" transform="rotate(-90 20 %.1f)" text-anchor="middle">%s</text>`+"\n",
		p.top+panelH/2, p.top+panelH/2, html.EscapeString(p.yName))
}

// timeSteps are the tick steps of a time axis, in seconds.
var timeSteps = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
	60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400}

// axis returns the end of an axis showing 0 to v and its tick step: at
// most eight ticks of 1, 2 or 5 times a power of ten, or of a round
// duration for time.
func axis(v float64, isTime bool) (end, step float64) {
	if !(v > 0) {
		v = 1
	}
	if isTime {
		step = timeSteps[len(timeSteps)-1]
		for _, st := range timeSteps {
			if v/st <= 8 {
				step = st
				break
			}
		}
	} else {
		p := math.Pow(10, math.Floor(math.Log10(v/8)))
		step = 10 * p
		for _, m := range []float64{1, 2, 5} {
			if v/(m*p) <= 8 {
				step = m * p
				break
			}
		}
	}
	return math.Ceil(v/step-1e-9) * step, step
}

func (p *panel) polyline(s *svgDoc, xs, ys []float64, color, dash string) {
	var pts strings.Builder
	for i := range xs {
		fmt.Fprintf(&pts, "%.1f,%.1f ", p.x(xs[i]), p.y(ys[i]))
	}
	s.printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`+"\n", pts.String(), color, dash)
}

func secondsLabel(v float64) string {
	d := time.Duration(v * float64(time.Second))
	switch {
	case v == 0:
		return "0"
	case d < time.Second:
		return fmt.Sprintf("%gms", math.Round(v*1e4)/10)
	case d < 2*time.Minute:
		return fmt.Sprintf("%gs", math.Round(v*100)/100)
	case d < 2*time.Hour:
		return fmt.Sprintf("%gm", math.Round(v/60*10)/10)
	}
	return fmt.Sprintf("%gh", math.Round(v/3600*10)/10)
}

func countLabel(v float64) string { return fmt.Sprintf("%g", math.Round(v*100)/100) }

func percentLabel(v float64) string { return fmt.Sprintf("%g%%", math.Round(v*100)/100) }

// plotted is a candidate drawn over time.
type plotted struct {
	name   string
	color  string
	series *replay.Series
}

func plotSVG(r *tuneReport) string {
	var s svgDoc
	height := panelTop + 3*panelH + 2*panelGap + 60
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="sans-serif">`+"\n", plotWidth, height, plotWidth, height)
	s.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	s.text(plotLeft, 24, "start", "16", fmt.Sprintf("shaper tune: policy %s, trace %s", r.Policy, filepath.Base(r.Trace)))
	overTime(&s, r)
	tradeOff(&s, r, panelTop+2*(panelH+panelGap))
	s.printf("</svg>\n")
	return s.b.String()
}

// timeLines returns the candidates drawn over time: the current policy,
// and the recommended one when it is another; same says the recommended
// one's curves are the current one's (drawn once).
func timeLines(r *tuneReport) (lines []plotted, same bool) {
	cur := &r.Results[r.Current]
	lines = []plotted{{"current: " + replay.DescribeAmong(r.Results, cur.Policy), plotColors[0], cur.Series}}
	if r.hasTargets() && r.Choice.Best >= 0 && r.Choice.Best != r.Current {
		best := &r.Results[r.Choice.Best]
		name := "recommended: " + replay.DescribeAmong(r.Results, best.Policy)
		if same = reflect.DeepEqual(best.Series, cur.Series); same {
			name += " (the same curves)"
		}
		lines = append(lines, plotted{name, plotColors[1], best.Series})
	}
	return lines, same
}

// timePanels returns the panels of queue depth and time in queue, their
// time axis the trace's span: from its start to its last submission.
func timePanels(r *tuneReport, lines []plotted) (depth, wait panel) {
	depth = panel{top: panelTop, xTime: true, xExact: true, xFmt: secondsLabel, yFmt: countLabel, xName: "time in the trace", yName: "jobs queued (all keys)"}
	wait = panel{top: panelTop + panelH + panelGap, xTime: true, xExact: true, yTime: true, xFmt: secondsLabel, yFmt: secondsLabel, xName: "time in the trace (when delivered)", yName: "time in queue"}
	depth.xMax = r.Results[r.Current].Span.Seconds()
	for _, l := range lines {
		if l.series == nil {
			continue
		}
		if depth.xMax == 0 { // one instant: show its first step
			depth.xMax = l.series.Step.Seconds()
		}
		for _, pt := range seriesUntil(l.series, depth.xMax) {
			depth.yMax = max(depth.yMax, pt.queued)
			wait.yMax = max(wait.yMax, pt.waitMax)
		}
	}
	wait.xMax = depth.xMax
	return depth, wait
}

// seriesPoint is a point of a series as drawn: at the middle of its step,
// or at the axis's end for the step it ends in.
type seriesPoint struct{ at, queued, waitMax, waitMean float64 }

// seriesUntil returns the points of s from the start to end (in seconds):
// the steps that begin before it.
func seriesUntil(s *replay.Series, end float64) []seriesPoint {
	step := s.Step.Seconds()
	var out []seriesPoint
	for j, pt := range s.Points {
		if float64(j)*step >= end && j > 0 {
			break
		}
		out = append(out, seriesPoint{min((float64(j)+0.5)*step, end), float64(pt.Queued), pt.WaitMax.Seconds(), pt.MeanWait().Seconds()})
	}
	return out
}

// overTime draws queue depth and time in queue over the trace for the
// current and the recommended policy.
func overTime(s *svgDoc, r *tuneReport) {
	lines, same := timeLines(r)
	depth, wait := timePanels(r, lines)
	depth.frame(s, "Queue depth over the trace")
	wait.frame(s, "Time in queue over the trace: longest (solid) and mean (dashed) per step")
	tail := 0.0 // how long the queues took to drain after the trace's end
	for i, l := range lines {
		if l.series != nil && !(same && i > 0) {
			var xs, qs, maxes, means []float64
			for _, pt := range seriesUntil(l.series, depth.xMax) {
				xs, qs = append(xs, pt.at), append(qs, pt.queued)
				maxes, means = append(maxes, pt.waitMax), append(means, pt.waitMean)
			}
			depth.polyline(s, xs, qs, l.color, "none")
			wait.polyline(s, xs, maxes, l.color, "none")
			wait.polyline(s, xs, means, l.color, "4 3")
			tail = max(tail, l.series.Step.Seconds()*float64(len(l.series.Points))-depth.xMax)
		}
		for _, p := range []*panel{&depth, &wait} {
			y := p.top + 20 + 18*float64(i)
			s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", legendLeft, y-4, legendLeft+18, y-4, l.color)
			s.text(legendLeft+24, y, "start", "11", l.name)
		}
	}
	if len(lines) == 1 {
		s.text(legendLeft, depth.top+60, "start", "11", "(no recommendation to compare)")
	}
	if first := lines[0].series; first != nil && tail >= 2*first.Step.Seconds() {
		s.text(legendLeft, wait.top+panelH-20, "start", "11", fmt.Sprintf("the queues drained %s", secondsLabel(tail)))
		s.text(legendLeft, wait.top+panelH-6, "start", "11", "after the trace's end (not drawn)")
	}
}

// tradeOff draws every candidate's rejections against its p99 wait, one
// line per outflow (and total) through its queue sizes, with the targets'
// corner shaded.
func tradeOff(s *svgDoc, r *tuneReport, top float64) {
	p := panel{top: top, yTime: true, xFmt: percentLabel, yFmt: secondsLabel, xName: "rejected (% of submissions)", yName: "p99 time in queue"}
	for i := range r.Results {
		p.xMax = max(p.xMax, 100*r.Results[i].RejectedShare())
		p.yMax = max(p.yMax, r.Results[i].Wait.P99.Seconds())
	}
	if t := r.Targets; t.MaxReject != nil {
		p.xMax = max(p.xMax, 100**t.MaxReject)
	}
	p.yMax = max(p.yMax, r.Targets.MaxWait.Seconds())
	p.frame(s, "Rejections against wait, per candidate (one line per outflow, queue growing along it)")
	legend := 0 // legend lines drawn
	if r.Targets.MaxWait > 0 || r.Targets.MaxReject != nil {
		x, y := p.xMax, 0.0
		if t := r.Targets.MaxReject; t != nil {
			x = 100 * *t
		}
		if r.Targets.MaxWait > 0 {
			y = r.Targets.MaxWait.Seconds()
		} else {
			y = p.yMax
		}
		targetBox := `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#2ca02c" fill-opacity="0.12" stroke="#2ca02c" stroke-dasharray="5 3"/>` + "\n"
		s.printf(targetBox, p.x(0), p.y(y), p.x(x)-p.x(0), p.y(0)-p.y(y))
		s.printf(targetBox, legendLeft, p.top+8, 18.0, 14.0)
		s.text(legendLeft+24, p.top+20, "start", "11", "targets")
		legend++
	}
	// Group the candidates by outflow and total.
	groups := map[string][]int{}
	var names []string
	for i := range r.Results {
		pol := r.Results[i].Policy
		name := "outflow " + pol.Outflow.String()
		if !pol.Total.IsZero() {
			name += ", total " + pol.Total.String()
		}
		if _, ok := groups[name]; !ok {
			names = append(names, name)
		}
		groups[name] = append(groups[name], i)
	}
	var labels labeler
	for g, name := range names {
		idx := groups[name]
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(r.Results[a].Policy.Queue, r.Results[b].Policy.Queue) })
		color := plotColors[(g+2)%len(plotColors)]
		var xs, ys, px, py []float64
		var queues []int
		for _, i := range idx {
			xs = append(xs, 100*r.Results[i].RejectedShare())
			ys = append(ys, r.Results[i].Wait.P99.Seconds())
			px, py = append(px, p.x(xs[len(xs)-1])), append(py, p.y(ys[len(ys)-1]))
			queues = append(queues, r.Results[i].Policy.Queue)
		}
		p.polyline(s, xs, ys, color, "none")
		for k := range idx {
			s.printf(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", px[k], py[k], color)
		}
		// Candidates that decide alike share a label; labels of lines
		// that meet are set apart.
		for _, l := range mergeLabels(px, py, queues) {
			x, y := labels.place(l.x, l.y, l.String())
			s.printf(`<text x="%.1f" y="%.1f" text-anchor="start" font-size="%g" fill="%s">%s</text>`+"\n", x, y, labelSize, color, html.EscapeString(l.String()))
		}
		y := p.top + 20 + 18*float64(legend)
		legend++
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", legendLeft, y-4, legendLeft+18, y-4, color)
		s.text(legendLeft+24, y, "start", "11", name)
	}
	// Rings of two sizes: both show when the two are one candidate, or
	// decide alike.
	mark := func(i int, color, label string, radius float64) {
		res := &r.Results[i]
		x, y := p.x(100*res.RejectedShare()), p.y(res.Wait.P99.Seconds())
		s.printf(`<circle cx="%.1f" cy="%.1f" r="%g" fill="none" stroke="%s" stroke-width="2.5"/>`+"\n", x, y, radius, color)
		ly := p.top + 20 + 18*float64(legend)
		legend++
		s.printf(`<circle cx="%.1f" cy="%.1f" r="6" fill="none" stroke="%s" stroke-width="2.5"/>`+"\n", legendLeft+9, ly-4, color)
		s.text(legendLeft+24, ly, "start", "11", label)
	}
	mark(r.Current, plotColors[0], "current", 8)
	if r.hasTargets() && r.Choice.Best >= 0 {
		mark(r.Choice.Best, plotColors[1], "recommended", 11)
	}
}
