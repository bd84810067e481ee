package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
)

// numbers is a JSON array of n copies of the number text num.
func numbers(num string, n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(num+",", n), ",") + "]"
}

// A number whose stored form is far longer than written (jsonb keeps every
// digit: 1e131071 is 8 bytes in and 131,072 out) is refused with a 422
// naming the item and field, wherever a request carries JSON: a submit's
// payload, a batch item's, a result, an enqueued task's payload, a batch
// report item's result, a schedule's task. Nothing is created or changed.
// Floats in any notation are fine.
func TestNumbersThatGrowFarOnceStoredAreRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	fields := func(r *testclient.Response) []string {
		t.Helper()
		return r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields()
	}
	r := c.Do(http.MethodPost, "/tasks/v1", `{"queue":"q","payload":{"n":1e131071}}`)
	require.Equal(t, []string{"payload"}, fields(r))
	require.Contains(t, string(r.Body), "1e131071 is 8 bytes written and 131072 stored")

	items := make([]string, 10)
	for i := range items {
		items[i] = `{"queue":"q","payload":1}`
	}
	items[3] = `{"queue":"q","payload":` + numbers("1e131071", 20) + `}`
	require.Equal(t, []string{"tasks[3].payload"}, fields(c.Do(http.MethodPost, "/tasks/v1/batch", `{"tasks":[`+strings.Join(items, ",")+`]}`)))
	require.Zero(t, countTasks(t, s, "q"), "nothing created")

	running := submitAndClaim(t, c, "w", jsonObj{"queue": "work"})
	body := func(extra string) string {
		return fmt.Sprintf(`{"worker_id":"w","lease_id":%q%s}`, running.Lease(), extra)
	}
	require.Equal(t, []string{"result"}, fields(c.Do(http.MethodPost, "/tasks/v1/"+running.ID+"/complete", body(`,"result":-9e9999`))))
	require.Equal(t, []string{"enqueue[1].payload"}, fields(c.Do(http.MethodPost, "/tasks/v1/"+running.ID+"/complete",
		body(`,"result":1,"enqueue":[{"queue":"next","payload":1},{"queue":"next","payload":{"a":[1e-9999]}}]`))))
	require.Equal(t, "RUNNING", c.Get(running.ID).Status, "a refused report changes nothing")
	require.Zero(t, countTasks(t, s, "next"))

	var outcomes struct {
		Items []struct {
			Outcome string              `json:"outcome"`
			Problem *testclient.Problem `json:"problem"`
		} `json:"items"`
	}
	c.Do(http.MethodPost, "/tasks/v1/complete", fmt.Sprintf(`{"worker_id":"w","items":[{"id":%q,"lease_id":%q,"result":[1e5000]}]}`,
		running.ID, running.Lease())).Expect(t, http.StatusOK, &outcomes)
	require.Equal(t, "error", outcomes.Items[0].Outcome)
	require.Equal(t, []string{"items[0].result"}, outcomes.Items[0].Problem.Fields())

	require.Equal(t, []string{"task.payload"}, fields(c.Do(http.MethodPost, "/schedules/v1",
		`{"name":"n","cron":"@hourly","task":{"queue":"q","payload":1e5000}}`)))

	// Every float64, in any notation.
	floats := `[1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 4.9406564584124654e-324, 1e21, 1e-7, 6.02214076e23]`
	c.Do(http.MethodPost, "/tasks/v1", `{"queue":"floats","payload":`+floats+`}`).Expect(t, http.StatusCreated, nil)
}

// What one request makes the server store, and answer with, is bounded by
// the request: its JSON values may take at most 4 times their size plus
// 64 KiB once stored. A batch whose payloads are each allowed (numbers
// that grow, but not far) and together would store 20 times their size is
// refused naming the list, and nothing is created; so is a batch report
// whose items' results together would. At the bound, the answer of an
// accepted batch is within it.
func TestARequestsStoredJSONIsBoundedByItsSize(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	items := make([]string, 200)
	for i := range items {
		items[i] = `{"queue":"amp","payload":` + numbers("1e100", 300) + `}` // 1.5 KB in, 30 KB stored each
	}
	r := c.Do(http.MethodPost, "/tasks/v1/batch", `{"tasks":[`+strings.Join(items, ",")+`]}`)
	p := r.Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"tasks"}, p.Fields())
	require.Contains(t, p.Errors[0].Message, "more than 4 times")
	require.Zero(t, countTasks(t, s, "amp"))

	// A batch report whose results together exceed it: every item fails.
	c.Register(jsonObj{"id": "w"})
	var reports []string
	for range 40 {
		c.Submit(jsonObj{"queue": "rep"})
	}
	for _, tk := range c.Claim(jsonObj{"worker_id": "w", "queue": "rep", "limit": 40}) {
		reports = append(reports, fmt.Sprintf(`{"id":%q,"lease_id":%q,"result":%s}`, tk.ID, tk.Lease(), numbers("1e100", 300)))
	}
	require.Len(t, reports, 40)
	var outcomes struct {
		Items []struct {
			Outcome string              `json:"outcome"`
			Problem *testclient.Problem `json:"problem"`
		} `json:"items"`
	}
	c.Do(http.MethodPost, "/tasks/v1/complete", `{"worker_id":"w","items":[`+strings.Join(reports, ",")+`]}`).
		Expect(t, http.StatusOK, &outcomes)
	for _, o := range outcomes.Items {
		require.Equal(t, "error", o.Outcome)
		require.Equal(t, []string{"items"}, o.Problem.Fields())
	}

	// At the bound: floats that store 3.7 times their text, 1 MB of them.
	floats := numbers("1e-18", 1000) // 6 bytes each in, 22 once stored
	items = items[:0]
	for len(strings.Join(items, ",")) < 1<<20 {
		items = append(items, `{"queue":"bound","payload":`+floats+`}`)
	}
	req := `{"tasks":[` + strings.Join(items, ",") + `]}`
	r = c.Do(http.MethodPost, "/tasks/v1/batch", req).Expect(t, http.StatusCreated, nil)
	require.Less(t, len(r.Body), 4*len(req)+64<<10+1000*len(items), "the answer is within the request's bound")
	var created struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &created))
	require.Len(t, created.Tasks, len(items))
}
