package main

import (
	"math"
	"strconv"
	"strings"
)

// box is a rectangle on the page: a label's extent.
type box struct{ x0, y0, x1, y1 float64 }

func (a box) overlaps(b box) bool { return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1 }

// labelSize is the font size of the points' labels; labelWidth the width
// of one of their characters, a generous estimate for a sans-serif font.
const (
	labelSize  = 10.0
	labelWidth = 0.62 * labelSize
)

// labelBox is the extent of text written from (x, y), its baseline.
func labelBox(x, y float64, text string) box {
	return box{x, y - labelSize, x + labelWidth*float64(len([]rune(text))), y + 0.25*labelSize}
}

// labeler places the labels of a chart's points so that none overlaps
// another: a label goes beside its point, or as near above or below it as
// it fits.
type labeler struct{ placed []box }

// place returns where to write text for the point at (x, y): its label's
// baseline start.
func (l *labeler) place(x, y float64, text string) (float64, float64) {
	lx, ly := x+6, y-5
	const step = labelSize + 2
	for i := range 24 {
		// 0, -1, +1, -2, +2…: above first, then below.
		off := float64((i+1)/2) * step
		if i%2 == 1 {
			off = -off
		}
		b := labelBox(lx, ly+off, text)
		if !l.free(b) {
			continue
		}
		l.placed = append(l.placed, b)
		return lx, ly + off
	}
	l.placed = append(l.placed, labelBox(lx, ly, text))
	return lx, ly // crowded beyond reason: overlap rather than wander off
}

func (l *labeler) free(b box) bool {
	for _, p := range l.placed {
		if b.overlaps(p) {
			return false
		}
	}
	return true
}

// pointLabel is the label of the points of one line drawn at one place.
type pointLabel struct {
	x, y   float64 // the point, on the page
	queues []int
}

// String says the queue sizes of the points: "q 100", "q 100, 200".
func (p pointLabel) String() string {
	qs := make([]string, len(p.queues))
	for i, q := range p.queues {
		qs[i] = strconv.Itoa(q)
	}
	return "q " + strings.Join(qs, ", ")
}

// mergeLabels returns the labels of the points of one line (xs, ys on the
// page, with their queue sizes): points drawn at one place (within a pixel:
// candidates that decide alike) share one label.
func mergeLabels(xs, ys []float64, queues []int) []pointLabel {
	var out []pointLabel
	for i := range xs {
		if n := len(out); n > 0 && math.Abs(out[n-1].x-xs[i]) < 1 && math.Abs(out[n-1].y-ys[i]) < 1 {
			out[n-1].queues = append(out[n-1].queues, queues[i])
			continue
		}
		out = append(out, pointLabel{xs[i], ys[i], []int{queues[i]}})
	}
	return out
}
