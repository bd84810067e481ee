package ui

import (
	"fmt"
	"html/template"
	"net/url"
	"strconv"
)

// sparkHeight is the vertical resolution of the overview's sparklines: a
// per-minute count is drawn at one of sparkHeight+1 levels of the series'
// own maximum, so the path stays short (the overview of 1,000 queues must
// stay small; docs/dashboard.md).
const sparkHeight = 8

// sparkline draws a series (oldest first, one point per minute) as an
// inline SVG step line. It is hidden from assistive technology: the text
// beside it gives the last minute's count and the column header says what
// it shows.
func sparkline(xs []int64) template.HTML {
	return svgSeries("", xs, sparkHeight, "sp")
}

// chart is the queue page's larger chart: the same line, taller, with its
// peak written above it.
func chart(label string, xs []int64) template.HTML {
	peak, total := int64(0), int64(0)
	for _, x := range xs {
		peak, total = max(peak, x), total+x
	}
	return template.HTML(fmt.Sprintf(`<figure class="chart"><figcaption>%s <span class="muted">peak %d/min · %d in the hour · now %d/min</span></figcaption>%s</figure>`,
		template.HTMLEscapeString(label), peak, total, lastOf(xs), svgSeries(label, xs, 40, "ch")))
}

func svgSeries(label string, xs []int64, height int, class string) template.HTML {
	n := len(xs)
	peak, total := int64(0), int64(0)
	for _, x := range xs {
		peak, total = max(peak, x), total+x
	}
	// The path, appended by hand: the overview draws four per queue.
	d := make([]byte, 0, 16+6*n)
	d = append(d, "M0 "...)
	if peak == 0 {
		d = strconv.AppendInt(d, int64(height), 10)
		d = append(d, 'h')
		d = strconv.AppendInt(d, int64(max(n, 1)), 10)
	} else {
		// A step line: each minute is a horizontal segment of width 1 at
		// its level; runs of one level merge into one segment.
		level := func(x int64) int64 { return int64(height) - (x*int64(height)+peak/2)/peak }
		y := level(xs[0])
		d = strconv.AppendInt(d, y, 10)
		run := int64(0)
		for i, x := range xs {
			if ly := level(x); i > 0 && ly != y {
				d = append(d, 'h')
				d = strconv.AppendInt(d, run, 10)
				d = append(d, 'V')
				d = strconv.AppendInt(d, ly, 10)
				y, run = ly, 0
			}
			run++
		}
		d = append(d, 'h')
		d = strconv.AppendInt(d, run, 10)
	}
	a11y := `aria-hidden="true"`
	if label != "" {
		a11y = `role="img" aria-label="` + template.HTMLEscapeString(fmt.Sprintf(
			"%s per minute over the last hour: peak %d, total %d, last minute %d", label, peak, total, lastOf(xs))) + `"`
	}
	return template.HTML(`<svg class="` + class + `" viewBox="0 0 ` + strconv.Itoa(max(n, 1)) + ` ` + strconv.Itoa(height) +
		`" preserveAspectRatio="none" ` + a11y + `><path d="` + string(d) + `"/></svg>`)
}

// escapePath escapes a queue name, schedule name or worker id for a path
// segment.
func escapePath(s string) string { return url.PathEscape(s) }
