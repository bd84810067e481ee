package tests

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
)

// notText are query values that are not text PostgreSQL can hold: invalid
// UTF-8 (a lone byte, a cut sequence, an encoded surrogate) and NUL.
var notText = []string{"%ff", "a%c3", "%ed%a0%80", "%00", "a%00b"}

// Every filter parameter of every listing route, of the API and of the
// dashboard, answers 422 to a value that is not text (naming the
// parameter, on the API), never a 500: the value never reaches a
// statement. Parameters the route does not know are checked alike. The
// server and the database are the real ones, with a task in the queue the
// filters look at.
func TestEveryListingFilterRefusesTextPostgreSQLCannotHold(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "group_key": "g"}).Expect(t, http.StatusCreated, nil)

	api := map[string][]string{
		"/tasks/v1": {"queue", "status", "dead_reason", "group_key", "error_contains", "text", "created_after", "created_before",
			"limit", "cursor", "unknown"},
		"/queues/v1":     {"prefix", "pattern", "min_pending", "paused", "limit", "cursor", "unknown"},
		"/workers/v1":    {"unknown"},
		"/schedules/v1":  {"unknown"},
		"/events/v1":     {"queue", "type", "unknown"},
		"/admin/v1/keys": {"unknown"},
	}
	checked := 0
	for path, params := range api {
		for _, param := range params {
			for _, bad := range notText {
				r := c.Do(http.MethodGet, path+"?"+param+"="+bad, nil)
				p := r.Problem(t, http.StatusUnprocessableEntity, "validation-error")
				require.Equal(t, []string{param}, p.Fields(), "%s", r)
				checked++
			}
		}
	}
	// A parameter whose name is not text.
	c.Do(http.MethodGet, "/tasks/v1?%ff=1", nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")

	ui := map[string][]string{
		"/ui/":          {"q", "unknown"},
		"/ui/queues/q":  {"status", "group", "dead_reason", "created_after", "created_before", "text", "after", "unknown"},
		"/ui/dead":      {"unknown"},
		"/ui/workers":   {"unknown"},
		"/ui/schedules": {"unknown"},
		"/ui/tasks/00000000-0000-0000-0000-000000000000": {"unknown"},
		"/ui/login": {"next"},
	}
	for path, params := range ui {
		for _, param := range params {
			for _, bad := range notText {
				status, body := rawRequest(t, s.URL, http.MethodGet, path+"?"+param+"="+bad, "", nil, "")
				require.Equal(t, http.StatusUnprocessableEntity, status, "%s?%s=%s: %s", path, param, bad, body)
				checked++
			}
		}
	}
	// The dashboard's form of actions on every task a filter matches: its
	// filter fields and the others.
	for _, field := range []string{"status", "group", "dead_reason", "text", "created_after", "created_before", "action", "scope", "csrf"} {
		for _, bad := range notText {
			form := url.Values{"action": {"cancel"}, "scope": {"filter"}, "confirm": {"1"}}.Encode() + "&" + field + "=" + bad
			status, body := rawRequest(t, s.URL, http.MethodPost, "/ui/queues/q/tasks", "",
				http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, form)
			require.Equal(t, http.StatusUnprocessableEntity, status, "form %s=%s: %s", field, bad, body)
			checked++
		}
	}
	require.Greater(t, checked, 200)

	// Nothing was changed, and the listing still works.
	var page testclient.Page
	c.Do(http.MethodGet, "/tasks/v1?queue=q&group_key=g", nil).Expect(t, http.StatusOK, &page)
	require.Len(t, page.Tasks, 1)
	require.Equal(t, "PENDING", page.Tasks[0].Status)
	require.False(t, strings.Contains(string(c.Do(http.MethodGet, "/ui/queues/q?group=g", nil).Body), "Something went wrong"))
}
