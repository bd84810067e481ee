package ui

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/ports"
)

func TestSparklineDrawsEachMinuteAtItsLevel(t *testing.T) {
	t.Parallel()
	flat := string(sparkline(make([]int64, 60)))
	require.Contains(t, flat, `d="M0 8h60"`, "an idle hour is the baseline")
	require.Contains(t, flat, `aria-hidden="true"`)

	xs := make([]int64, 60)
	xs[59] = 10
	xs[30] = 5
	d := string(sparkline(xs))
	require.Contains(t, d, `d="M0 8h30V4h1V8h28V0h1"`, "steps at the levels of 5 and 10 of a peak of 10")

	c := string(chart("Claimed", xs))
	require.Contains(t, c, `role="img"`)
	require.Contains(t, c, "Claimed per minute over the last hour: peak 10, total 15, last minute 10")
}

func TestSafeNextKeepsOnlyDashboardPaths(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/ui/queues/a?status=DEAD": "/ui/queues/a?status=DEAD",
		"":                         "/ui/",
		"https://evil.example/ui/": "/ui/",
		"//evil.example/ui/":       "/ui/",
		"/ui/\\evil":               "/ui/",
		"/tasks/v1":                "/ui/",
	} {
		require.Equal(t, want, safeNext(in), in)
	}
}

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		origin, referer string
		ok              bool
	}{
		{"http://tm.example:8080", "", true},
		{"http://other.example:8080", "", false},
		{"http://tm.example:9090", "", false},
		{"null", "", false},
		{"", "http://tm.example:8080/ui/queues/a", true},
		{"", "http://evil.example/x", false},
		{"", "", true}, // not a browser's cross-site form: the CSRF token decides
	} {
		r := httptest.NewRequest("POST", "http://tm.example:8080/ui/logout", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.referer != "" {
			r.Header.Set("Referer", c.referer)
		}
		require.Equal(t, c.ok, sameOrigin(r), "%+v", c)
	}
}

func TestFlashShowsOnlyKnownMessages(t *testing.T) {
	t.Parallel()
	get := func(q string) string { return flashOf(httptest.NewRequest("GET", "/ui/?"+q, nil)) }
	require.Equal(t, "Done: 12 task(s) changed.", get("ok=bulk&n=12"))
	require.Empty(t, get("ok=bulk&n=<script>"))
	require.Empty(t, get("ok=Your+account+was+hacked"))
	require.True(t, strings.HasPrefix(get("ok=retried"), "Task retried"))
}

func TestOverviewRowsEscapeAndShowEveryFigure(t *testing.T) {
	t.Parallel()
	age := 75 * time.Second
	row := queueRow{QueueStats: ports.QueueStats{Queue: `a"<b>`, Pending: 3, Running: 2, Done: 1, Dead: 4, ActiveWorkers: 5,
		OldestPendingAge: &age}, Paused: true, Series: orEmpty(ports.RateSeries{})}
	row.Series.Claimed = append(make([]int64, 59), 9)
	html := string(overviewRows([]queueRow{row}))
	require.Contains(t, html, `data-queue="a&#34;&lt;b&gt;"`)
	require.Contains(t, html, `href="/ui/queues/a%22%3Cb%3E"`)
	require.NotContains(t, html, "<b>")
	for _, want := range []string{`<td class="n">3</td>`, `<td class="n">2</td>`, `<td class="n bad">4</td>`, "paused", "1m15s", "<span>9</span>"} {
		require.Contains(t, html, want)
	}
}
