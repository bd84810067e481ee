package ui

import (
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
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
	var d strings.Builder
	if peak == 0 {
		fmt.Fprintf(&d, "M0 %dh%d", height, max(n, 1))
	} else {
		// A step line: each minute is a horizontal segment of width 1 at
		// its level; runs of one level merge into one segment.
		level := func(x int64) int { return height - int((x*int64(height)+peak/2)/peak) }
		y := level(xs[0])
		fmt.Fprintf(&d, "M0 %d", y)
		run := 0
		for i, x := range xs {
			ly := level(x)
			if i > 0 && ly != y {
				fmt.Fprintf(&d, "h%dV%d", run, ly)
				y, run = ly, 0
			}
			run++
		}
		fmt.Fprintf(&d, "h%d", run)
	}
	a11y := `aria-hidden="true"`
	if label != "" {
		a11y = `role="img" aria-label="` + template.HTMLEscapeString(fmt.Sprintf(
			"%s per minute over the last hour: peak %d, total %d, last minute %d", label, peak, total, lastOf(xs))) + `"`
	}
	return template.HTML(`<svg class="` + class + `" viewBox="0 0 ` + strconv.Itoa(max(n, 1)) + ` ` + strconv.Itoa(height) +
		`" preserveAspectRatio="none" ` + a11y + `><path d="` + d.String() + `"/></svg>`)
}

// escapePath escapes a queue name, schedule name or worker id for a path
// segment.
func escapePath(s string) string { return url.PathEscape(s) }
