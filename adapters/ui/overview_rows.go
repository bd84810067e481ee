package ui

import (
	"html/template"
	"strconv"
	"strings"
)

// overviewRows renders the overview's table body. With a thousand queues
// it is most of the page, and writing it directly costs a tenth of the
// template's reflection (docs/dashboard.md, "Page weight and latency");
// every text is escaped as the template would.
func overviewRows(rows []queueRow) template.HTML {
	var b strings.Builder
	b.Grow(len(rows) * 1500)
	num := func(class string, n int64) {
		b.WriteString(`<td class="n`)
		b.WriteString(class)
		b.WriteString(`">`)
		b.WriteString(strconv.FormatInt(n, 10))
		b.WriteString(`</td>`)
	}
	for _, r := range rows {
		name := template.HTMLEscapeString(r.Queue)
		b.WriteString(`<tr data-queue="`)
		b.WriteString(name)
		b.WriteString(`"><th scope="row"><a href="/ui/queues/`)
		b.WriteString(template.HTMLEscapeString(escapePath(r.Queue)))
		b.WriteString(`">`)
		b.WriteString(name)
		b.WriteString(`</a>`)
		if p := r.Settings.Push; p != nil {
			b.WriteString(` <span class="badge" title="push delivery to `)
			b.WriteString(template.HTMLEscapeString(p.Host()))
			b.WriteString(`">push</span>`)
		}
		b.WriteString(`</th>`)
		num("", r.Pending)
		num("", r.Running)
		num("", r.Done)
		if r.Dead > 0 {
			num(" bad", r.Dead)
		} else {
			num("", r.Dead)
		}
		if r.Paused {
			b.WriteString(`<td><span class="badge warn">paused</span></td>`)
		} else {
			b.WriteString(`<td>no</td>`)
		}
		num("", r.ActiveWorkers)
		b.WriteString(`<td class="n">`)
		if r.OldestPendingAge != nil {
			b.WriteString(fmtAge(*r.OldestPendingAge))
		} else {
			b.WriteString(`—`)
		}
		b.WriteString(`</td>`)
		for _, xs := range [][]int64{r.Series.Enqueued, r.Series.Claimed, r.Series.Completed, r.Series.DeadLettered} {
			b.WriteString(`<td class="c">`)
			b.WriteString(string(sparkline(xs)))
			b.WriteString(`<span>`)
			b.WriteString(strconv.FormatInt(lastOf(xs), 10))
			b.WriteString(`</span></td>`)
		}
		b.WriteString("</tr>\n")
	}
	return template.HTML(b.String())
}
