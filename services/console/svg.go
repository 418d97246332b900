package console

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"time"

	"github.com/fencelab/fencelab/core/lab"
)

// Swimlane geometry.
const (
	laneW      = 760 // whole drawing
	laneLeft   = 130 // actor labels
	laneRight  = 24
	laneTop    = 28 // time axis
	laneH      = 22
	maxLanes   = 20 // more actors fold into one lane
	laneBottom = 34 // legend
)

// outcomeClass maps a step's outcome to its marker's class.
func outcomeClass(o string) string {
	switch o {
	case lab.Accepted:
		return "ok"
	case lab.Refused:
		return "refused"
	case lab.Violates:
		return "violates"
	case lab.Replayed:
		return "replayed"
	case lab.Lost:
		return "lost"
	case "":
		return "say"
	}
	return "other"
}

// swimlane draws a run's timeline: one lane per actor (in order of first
// appearance), the database clock across, one marker per step shaped by
// its outcome (refused and violating steps stand out), fences and versions
// written beside their markers. Each marker's <title> is the step's line,
// and the page lists the steps as a table too (the drawing is a picture of
// the table, not the only copy of it).
func swimlane(res *lab.Result) template.HTML {
	steps := res.Timeline
	if len(steps) == 0 {
		return template.HTML(`<p class="muted">No steps recorded.</p>`)
	}
	var actors []string
	lane := map[string]int{}
	folded := 0
	for _, s := range steps {
		if _, ok := lane[s.Actor]; ok {
			continue
		}
		if len(actors) < maxLanes-1 {
			lane[s.Actor] = len(actors)
			actors = append(actors, s.Actor)
			continue
		}
		lane[s.Actor] = maxLanes - 1
		folded++
	}
	if folded > 0 {
		actors = append(actors, fmt.Sprintf("+%d more actors", folded))
	}
	t0 := res.Started
	t1 := t0
	for _, s := range steps {
		if s.At.Before(t0) {
			t0 = s.At
		}
		if s.At.After(t1) {
			t1 = s.At
		}
	}
	span := t1.Sub(t0)
	if span <= 0 {
		span = time.Millisecond
	}
	plotW := float64(laneW - laneLeft - laneRight)
	xOf := func(t time.Time) float64 { return laneLeft + float64(t.Sub(t0))/float64(span)*plotW }
	h := laneTop + len(actors)*laneH + laneBottom
	var b strings.Builder
	// The drawing scales to its column (two versions sit side by side);
	// the viewBox keeps its proportions.
	fmt.Fprintf(&b, `<svg class="swimlane" role="img" viewBox="0 0 %d %d" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg">`, laneW, h)
	fmt.Fprintf(&b, `<title>%s</title>`, esc(fmt.Sprintf("timeline of %s%s: %d steps by %d actors", res.ID, naiveSuffix(res), len(steps), len(actors))))
	// Time axis: five ticks in seconds from the first step.
	for i := 0; i <= 4; i++ {
		x := laneLeft + plotW*float64(i)/4
		fmt.Fprintf(&b, `<line class="tick" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, x, laneTop-4, x, laneTop+len(actors)*laneH)
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">+%.3fs</text>`, x, laneTop-8, span.Seconds()*float64(i)/4)
	}
	for i, a := range actors {
		y := laneTop + i*laneH
		fmt.Fprintf(&b, `<rect class="lane lane%d" x="0" y="%d" width="%d" height="%d"/>`, i%2, y, laneW, laneH)
		fmt.Fprintf(&b, `<text class="actor" x="6" y="%d">%s</text>`, y+15, esc(trunc(a, 18)))
	}
	for _, s := range steps {
		i := lane[s.Actor]
		cy := float64(laneTop + i*laneH + laneH/2)
		cx := xOf(s.At)
		cls := outcomeClass(s.Outcome)
		tip := esc(lab.FormatStep(s, t0))
		fmt.Fprintf(&b, `<g class="step %s" data-outcome="%s"><title>%s</title>`, cls, esc(s.Outcome), tip)
		switch cls {
		case "refused":
			fmt.Fprintf(&b, `<path d="M%.1f %.1fl8 8m0 -8l-8 8" />`, cx-4, cy-4)
		case "violates":
			fmt.Fprintf(&b, `<path d="M%.1f %.1fl6 6l-6 6l-6 -6z" />`, cx, cy-6)
		case "lost", "other":
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="8" height="8"/>`, cx-4, cy-4)
		default:
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4"/>`, cx, cy)
		}
		if s.Fence != 0 && i < maxLanes-1 {
			fmt.Fprintf(&b, `<text class="fence" x="%.1f" y="%.1f">f%d</text>`, cx+6, cy-3, s.Fence)
		}
		b.WriteString(`</g>`)
	}
	ly := laneTop + len(actors)*laneH + 22
	x := laneLeft
	for _, l := range []struct{ cls, label string }{{"ok", "accepted"}, {"refused", "refused"}, {"violates", "violates"},
		{"replayed", "replayed"}, {"lost", "lost/other"}, {"say", "narration"}} {
		fmt.Fprintf(&b, `<g class="step %s"><circle cx="%d" cy="%d" r="4"/></g><text class="axis" x="%d" y="%d">%s</text>`, l.cls, x, ly-4, x+8, ly, l.label)
		x += 95
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func naiveSuffix(r *lab.Result) string {
	if r.Naive {
		return " (naive)"
	}
	return ""
}

// series is one line of a chart.
type series struct {
	Name   string
	Class  string
	Values []float64
}

// chart draws a small line chart of samples taken at times (oldest
// first), y from 0 to the largest value.
func chart(title string, times []time.Time, ss ...series) template.HTML {
	const w, h, left, top, bottom = 380, 110, 44, 16, 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg"><title>%s</title>`, w, h, w, h, esc(title))
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="11">%s</text>`, left, esc(title))
	if len(times) < 2 {
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d">collecting samples…</text></svg>`, left, h/2)
		return template.HTML(b.String())
	}
	top0 := 1.0
	for _, s := range ss {
		for _, v := range s.Values {
			top0 = max(top0, v)
		}
	}
	plotW, plotH := float64(w-left-8), float64(h-top-bottom)
	t0, t1 := times[0], times[len(times)-1]
	span := max(t1.Sub(t0), time.Second)
	fmt.Fprintf(&b, `<line class="tick" x1="%d" y1="%d" x2="%d" y2="%d"/>`, left, h-bottom, w-8, h-bottom)
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="end">%s</text>`, left-4, top+8, esc(short(top0)))
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="end">0</text>`, left-4, h-bottom)
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d">-%s</text>`, left, h-4, esc(span.Round(time.Second).String()))
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="end">now</text>`, w-8, h-4)
	for _, s := range ss {
		var pts []string
		for i, v := range s.Values {
			x := float64(left) + float64(times[i].Sub(t0))/float64(span)*plotW
			y := float64(top) + plotH - v/top0*plotH
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		fmt.Fprintf(&b, `<polyline class="series %s" points="%s"><title>%s: now %s</title></polyline>`,
			esc(s.Class), strings.Join(pts, " "), esc(s.Name), esc(short(s.Values[len(s.Values)-1])))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func short(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprint(int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

func esc(s string) string { return html.EscapeString(s) }

func trunc(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
