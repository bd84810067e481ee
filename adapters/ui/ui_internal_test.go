package ui

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"runtime"
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

// indentPrefix indents as json.Indent does, up to its limit.
func TestIndentPrefixIndentsAsJSONIndent(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`1`, `"a"`, `{}`, `[]`, `{"a": 1, "b": [1, 2, {"c": {}}], "d": []}`, `[[[]], [ ], { }]`,
		`{"s": "a, b: {c} [d] \" \\ \u00e9"}`, " \t[ 1 ,\n 2 ] ", `[{"k": [1e300, -0.5, true, null]}]`} {
		var want bytes.Buffer
		require.NoError(t, json.Indent(&want, []byte(raw), "", "  "))
		require.Equal(t, strings.TrimRight(want.String(), " \t\n"), string(indentPrefix([]byte(raw), 1<<20)), raw)
		for limit := range len(want.String()) {
			got := indentPrefix([]byte(raw), limit)
			require.Equal(t, want.String()[:limit], string(got), "%s cut at %d", raw, limit)
		}
	}
}

func FuzzIndentPrefixIndentsAsJSONIndent(f *testing.F) {
	for _, raw := range []string{`{"a": [1, {"b": []}]}`, `[[], {}, "x"]`, `"\"\\"`} {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var want bytes.Buffer
		if json.Indent(&want, []byte(raw), "", "  ") != nil {
			t.Skip("stored values are valid JSON")
		}
		got := string(indentPrefix([]byte(raw), len(want.String())+10))
		require.Equal(t, strings.TrimRight(want.String(), " \t\n\r"), strings.TrimRight(got, " \t\n\r"))
	})
}

// The task page shows maxShownJSON of a value however its indentation would
// grow it: a payload of 40 kB, 20,000 numbers nested 400 levels deep, is
// 16 MB indented (800 spaces a number), and is indented no further than the
// page shows. (Indenting it all, as the page did, allocated 120 MB; a
// 1 MiB payload nested 500 levels deep would have been 500 MB.)
func TestTheTaskPageIndentsNoMoreThanItShows(t *testing.T) {
	raw := []byte(strings.Repeat("[", 400) + strings.TrimSuffix(strings.Repeat("1,", 20000), ",") + strings.Repeat("]", 400))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := jsonViewOf(raw)
	runtime.ReadMemStats(&after)
	require.True(t, v.Truncated)
	require.Equal(t, len(raw), v.Size)
	require.LessOrEqual(t, len(v.Text), maxShownJSON+len("\n…"))
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated to show it")
}
