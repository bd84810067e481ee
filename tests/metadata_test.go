package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
)

// Metadata comes with every way to create a task, shows on every view,
// rides on every lifecycle event, and filters listings (every pair must
// hold) and bulk actions.
func TestMetadataOverHTTP(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	acme := jsonObj{"tenant": "acme", "request.id": "r-1"}
	one := c.Submit(jsonObj{"queue": "m", "metadata": acme})
	require.Equal(t, map[string]string{"tenant": "acme", "request.id": "r-1"}, one.Metadata)
	plain := c.Submit(jsonObj{"queue": "m"})
	require.Equal(t, map[string]string{}, plain.Metadata, "{} when none")

	var batch struct{ Tasks []testclient.Task }
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{
		{"queue": "m", "metadata": jsonObj{"tenant": "acme"}},
		{"queue": "m", "metadata": jsonObj{"tenant": "globex"}},
	}}).Expect(t, http.StatusCreated, &batch)
	c.Register(jsonObj{"id": "w"})
	parent := c.Submit(jsonObj{"queue": "m-parent"})
	claimed := c.Claim(jsonObj{"worker_id": "w", "queue": "m-parent"})
	require.Len(t, claimed, 1)
	done := c.Complete(parent.ID, jsonObj{"worker_id": "w", "lease_id": claimed[0].Lease(),
		"enqueue": []jsonObj{{"queue": "m", "metadata": jsonObj{"tenant": "acme", "stage": "2"}}}})
	require.Len(t, done.Enqueued, 1)
	require.Equal(t, "2", done.Enqueued[0].Metadata["stage"])

	ids := func(query string) []string {
		var out []string
		for _, task := range c.List(query).Tasks {
			out = append(out, task.ID)
		}
		return out
	}
	require.ElementsMatch(t, []string{one.ID, batch.Tasks[0].ID, done.Enqueued[0].ID}, ids("metadata.tenant=acme"))
	require.ElementsMatch(t, []string{done.Enqueued[0].ID}, ids("metadata.tenant=acme&metadata.stage=2"))
	require.ElementsMatch(t, []string{one.ID}, ids("metadata.request.id=r-1&queue=m"))
	require.Empty(t, ids("metadata.tenant=ACME"))
	require.Equal(t, map[string]string{"tenant": "globex"}, c.Get(batch.Tasks[1].ID).Metadata)

	for _, q := range []string{"metadata.a%20b=x", "metadata.=x", "metadata.tenant=a&metadata.tenant=b", "metadata.k=" + strings.Repeat("x", 513)} {
		c.Do(http.MethodGet, "/tasks/v1?"+q, nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	}
	for _, m := range []jsonObj{{"a/b": "x"}, {"k": strings.Repeat("x", 513)}, {"k": 5}} {
		status := http.StatusUnprocessableEntity
		if _, ok := m["k"].(int); ok {
			status = http.StatusBadRequest
		}
		r := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "m", "metadata": m})
		require.Equal(t, status, r.Status, "%v: %s", m, r.Body)
	}

	// A bulk cancel by metadata cancels those tasks only.
	var res map[string]any
	c.Do(http.MethodPost, "/tasks/v1/bulk/cancel", jsonObj{"queue": "m", "metadata": jsonObj{"tenant": "globex"}}).Expect(t, http.StatusOK, &res)
	require.Equal(t, 1.0, res["matched"])
	require.Equal(t, "DEAD", c.Get(batch.Tasks[1].ID).Status)
	require.Equal(t, "PENDING", c.Get(batch.Tasks[0].ID).Status)

	// Every event of a task with metadata carries it.
	events := readEventsUntil(t, c, s.URL, "task_id="+one.ID, func() {
		c.Do(http.MethodPost, "/tasks/v1/"+one.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
	}, func(data string) bool { return strings.Contains(data, "task.dead_lettered") })
	var e struct{ Metadata map[string]string }
	require.NoError(t, json.Unmarshal([]byte(events[len(events)-1]), &e))
	require.Equal(t, map[string]string{"tenant": "acme", "request.id": "r-1"}, e.Metadata)
}
