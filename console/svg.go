package console

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"time"

	"github.com/fencelab/fencelab/core/lab"
)

// Swimlane geometry: a lane's drawing is laneH pixels tall. Every actor
// has its own lane (a run of 100 clients draws 100 lanes).
const laneH = 22

// lanesShown lanes are drawn open; the other actors' lanes are one
// collapsed group below them.
const lanesShown = 24

// mark is one outcome's look. Each differs by shape as well as colour,
// so a reader who cannot tell the colours apart tells the shapes apart:
// accepted a filled circle, refused a hollow square, violates a filled
// triangle, replayed a hollow circle, a lost answer a filled diamond,
// narration a short bar.
type mark struct{ cls, label, shape string }

var marks = []mark{
	{"ok", "accepted", `<circle cx="0" cy="11" r="5"/>`},
	{"refused", "refused", `<rect x="-5" y="6" width="10" height="10"/>`},
	{"violates", "violates", `<path d="M0 4 L7 17 L-7 17 Z"/>`},
	{"replayed", "replayed", `<circle cx="0" cy="11" r="5"/>`},
	{"lost", "lost answer / other", `<path d="M0 4 L6 11 L0 18 L-6 11 Z"/>`},
	{"say", "narration", `<rect x="-1.5" y="4" width="3" height="14"/>`},
}

func markOf(cls string) mark {
	if cls == "other" {
		cls = "lost"
	}
	for _, m := range marks {
		if m.cls == cls {
			return m
		}
	}
	return marks[len(marks)-1]
}

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

// legend is the key to the markers, as HTML text beside small drawings.
func legend() template.HTML {
	var b strings.Builder
	b.WriteString(`<ul class="legend">`)
	for _, m := range marks {
		fmt.Fprintf(&b, `<li><svg class="key step %s" width="16" height="22" viewBox="-8 0 16 22" aria-hidden="true">%s</svg> %s</li>`, m.cls, m.shape, esc(m.label))
	}
	b.WriteString(`</ul>`)
	return template.HTML(b.String())
}

// swimlane draws a run's timeline: one lane per actor, in order of first
// appearance, every actor reachable (past lanesShown, in a group that
// opens with one click),
// the database clock across, one marker per step shaped by its outcome.
// Labels and the time axis are HTML text on plain backgrounds, never SVG
// text over drawn shapes, so they read at the page's size and their
// contrast is decidable. Each marker's <title> is the step's line with its
// fence, and the page lists the steps as text too (the drawing is a
// picture of the table, not the only copy of it).
func swimlane(res *lab.Result) template.HTML {
	steps := res.Timeline
	if len(steps) == 0 {
		return template.HTML(`<p class="muted">No steps recorded.</p>`)
	}
	var actors []string
	lane := map[string]int{}
	for _, s := range steps {
		if _, ok := lane[s.Actor]; !ok {
			lane[s.Actor] = len(actors)
			actors = append(actors, s.Actor)
		}
	}
	t0, t1 := res.Started, res.Started
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
	// Markers are placed in percent of the track's width (a nested <svg>
	// at x="p%" carries its shape), so the drawing fits its column at any
	// width without stretching the shapes.
	pct := func(t time.Time) float64 { return 1 + 98*float64(t.Sub(t0))/float64(span) }
	byLane := make([][]lab.Step, len(actors))
	for _, s := range steps {
		byLane[lane[s.Actor]] = append(byLane[lane[s.Actor]], s)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<div class="swimlane" data-actors="%d" data-steps="%d">`, len(actors), len(steps))
	fmt.Fprintf(&b, `<p class="lanes-caption">%d actors, %d steps; the database clock runs across, from the first step.</p>`, len(actors), len(steps))
	b.WriteString(`<div class="lane axis"><span class="actor">actor</span><span class="ticks">`)
	for i := 0; i <= 4; i++ {
		fmt.Fprintf(&b, `<span>+%.3fs</span>`, span.Seconds()*float64(i)/4)
	}
	b.WriteString(`</span></div><div class="lanes">`)
	for i, a := range actors {
		if i == lanesShown {
			// The rest are one click away, drawn on the same clock: a
			// collapsed group rather than a scrolling box, whose clipped
			// labels neither a reader nor a contrast check can see whole.
			fmt.Fprintf(&b, `<details class="more-lanes"><summary>Show the other %d actors' lanes (%s … %s)</summary>`,
				len(actors)-lanesShown, esc(a), esc(actors[len(actors)-1]))
		}
		fmt.Fprintf(&b, `<div class="lane" data-actor="%s"><span class="actor" title="%s">%s</span>`, esc(a), esc(a), esc(trunc(a, 22)))
		// The track's padding holds the markers' overhang at either end,
		// so no marker ever covers the label beside it.
		fmt.Fprintf(&b, `<span class="track"><svg width="100%%" height="%d" aria-hidden="true">`, laneH)
		for _, s := range byLane[i] {
			cls := outcomeClass(s.Outcome)
			fmt.Fprintf(&b, `<svg x="%.2f%%" overflow="visible" class="step %s" data-outcome="%s"><title>%s</title>%s</svg>`,
				pct(s.At), cls, esc(s.Outcome), esc(lab.FormatStep(s, t0)), markOf(cls).shape)
		}
		b.WriteString(`</svg></span></div>`)
	}
	if len(actors) > lanesShown {
		b.WriteString(`</details>`)
	}
	b.WriteString(`</div></div>`)
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
// first), y from 0 to the largest value. Its title, scale and legend are
// HTML text around the drawing (no SVG text: it reads at the page's size
// and its contrast is decidable); colour says trouble only where a
// series' trouble flag is set.
func chart(title string, times []time.Time, ss ...series) template.HTML {
	const w, h = 380, 90
	var b strings.Builder
	b.WriteString(`<figure class="chart">`)
	fmt.Fprintf(&b, `<figcaption>%s</figcaption>`, esc(title))
	if len(times) < 2 {
		b.WriteString(`<p class="muted">Collecting samples…</p></figure>`)
		return template.HTML(b.String())
	}
	top0 := 1.0
	for _, s := range ss {
		for _, v := range s.Values {
			top0 = max(top0, v)
		}
	}
	t0, t1 := times[0], times[len(times)-1]
	span := max(t1.Sub(t0), time.Second)
	fmt.Fprintf(&b, `<div class="plot"><span class="ymax">%s</span><svg viewBox="0 0 %d %d" width="%d" height="%d" aria-hidden="true">`, esc(short(top0)), w, h, w, h)
	fmt.Fprintf(&b, `<line class="tick" x1="0" y1="%d" x2="%d" y2="%d"/><line class="tick" x1="0" y1="2" x2="%d" y2="2"/>`, h-1, w, h-1, w)
	for _, s := range ss {
		var pts []string
		for i, v := range s.Values {
			x := float64(times[i].Sub(t0)) / float64(span) * w
			y := 2 + float64(h-3) - v/top0*float64(h-3)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		fmt.Fprintf(&b, `<polyline class="series %s" points="%s"/>`, esc(s.Class), strings.Join(pts, " "))
	}
	fmt.Fprintf(&b, `</svg><span class="ymin">0</span></div><div class="xaxis"><span>−%s</span><span>now</span></div><ul class="legend">`, esc(span.Round(time.Second).String()))
	for _, s := range ss {
		fmt.Fprintf(&b, `<li><svg class="key" width="18" height="10" aria-hidden="true"><line class="series %s" x1="0" y1="5" x2="18" y2="5"/></svg> %s: now %s</li>`,
			esc(s.Class), esc(s.Name), esc(short(s.Values[len(s.Values)-1])))
	}
	b.WriteString(`</ul></figure>`)
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
