package tests

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

// overviewRow finds the queues of the overview's rows, in order.
var overviewRow = regexp.MustCompile(`data-queue="([^"]+)"`)

func overviewQueues(body string) []string {
	var out []string
	for _, m := range overviewRow.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// The dashboard's overview, and its live refresh, read and render a
// bounded page however many queues there are: with 100,000 queues (staged
// in SQL), every one busy this minute, the page shows the 100 busiest,
// busiest first; listed by name it shows 100 a page with a link to the
// next; a filter narrows both. The test asserts what the pages hold, not
// how long they take.
func TestTheOverviewShowsABoundedPageOfAHundredThousandQueues(t *testing.T) {
	t.Parallel()
	s, _ := startAPI(t, nil)
	pgtest.Queues(t, s.DB, pgtest.QueuesOpts{Count: 100_000, Prefix: "q-", Pending: 3, Active: true})
	get := func(path string, header http.Header) string {
		t.Helper()
		status, body := rawRequest(t, s.URL, http.MethodGet, path, "", header, "")
		require.Equal(t, http.StatusOK, status, "%s: %.300s", path, body)
		require.Less(t, len(body), 200_000, "%s: a bounded page", path)
		return body
	}
	for _, header := range []http.Header{nil, {"X-Ui-Fragment": {"live"}}} {
		names := overviewQueues(get("/ui/", header))
		require.Len(t, names, 100)
		require.Equal(t, []string{"q-100000", "q-099999", "q-099998"}, names[:3], "the busiest first")
	}

	body := get("/ui/?sort=name", nil)
	names := overviewQueues(body)
	require.Len(t, names, 100)
	require.Equal(t, "q-000001", names[0])
	require.Equal(t, "q-000100", names[99])
	require.Contains(t, body, "after=q-000100")
	names = overviewQueues(get("/ui/?sort=name&after=q-000100", nil))
	require.Len(t, names, 100)
	require.Equal(t, "q-000101", names[0])

	names = overviewQueues(get("/ui/?q=q-0999", nil))
	require.Len(t, names, 100)
	require.Equal(t, "q-099999", names[0])
	for _, n := range names {
		require.Contains(t, n, "q-0999")
	}
	names = overviewQueues(get("/ui/?q=q-09999&sort=name", nil))
	require.Equal(t, []string{"q-099990", "q-099991", "q-099992", "q-099993", "q-099994", "q-099995", "q-099996", "q-099997", "q-099998", "q-099999"}, names)
}
