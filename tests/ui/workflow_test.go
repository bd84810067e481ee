package ui_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
)

// A run of 1,000 tasks (a task that spawned 998 children and a join) on
// its page: counts, and a graph drawn on the server that stays a few boxes
// wide, its wide layer grouped by queue and status with counts; the task
// page links to its run; an admin cancels the run from the page; the dead
// letters show skipped tasks apart from failures.
func TestDashboardWorkflowPage(t *testing.T) {
	h := setup(t, false)
	tab := h.tab
	c := h.admin
	c.Register(map[string]any{"id": "ui-wf"})
	root := c.Submit(map[string]any{"queue": "ui-wf"})
	held := c.Claim(map[string]any{"worker_id": "ui-wf", "queue": "ui-wf"})
	require.Len(t, held, 1)
	items := make([]map[string]any, 0, 999)
	deps := make([]any, 0, 998)
	for i := range 998 {
		items = append(items, map[string]any{"queue": "ui-wf-kids", "ref": fmt.Sprint("k", i), "payload": i})
		deps = append(deps, map[string]any{"ref": fmt.Sprint("k", i), "on_failure": "skip"})
	}
	items = append(items, map[string]any{"queue": "ui-wf-join", "depends_on": deps})
	var spawned struct {
		Tasks []testclient.Task `json:"tasks"`
	}
	c.Do(http.MethodPost, "/tasks/v1/"+root.ID+"/spawn", map[string]any{"worker_id": "ui-wf", "lease_id": held[0].Lease(),
		"tasks": items}).Expect(t, http.StatusCreated, &spawned)
	// Some children done, one DEAD: the join is skipped.
	kids := c.Claim(map[string]any{"worker_id": "ui-wf", "queue": "ui-wf-kids", "limit": 50})
	for i, k := range kids {
		if i == 0 {
			c.Fail(k.ID, map[string]any{"worker_id": "ui-wf", "lease_id": k.Lease(), "retryable": false, "error": "bad input"})
			continue
		}
		c.Complete(k.ID, map[string]any{"worker_id": "ui-wf", "lease_id": k.Lease()})
	}
	join := spawned.Tasks[998].ID
	require.Equal(t, "dependency_skipped", c.Get(join).Reason())

	// The task page links to its run.
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/tasks/"+spawned.Tasks[3].ID), chromedp.WaitVisible(chromedp.CSS(`#task-workflow`)),
		chromedp.Click(chromedp.CSS(`#task-workflow`)), chromedp.WaitVisible(chromedp.CSS(`#wf-graph`)))
	require.Equal(t, h.srv.URL+"/ui/workflows/"+root.ID, h.location(tab))
	counts := h.text(tab, "#wf-counts")
	require.Contains(t, counts, "PENDING\n948")
	require.Contains(t, counts, "DONE\n49")
	require.Contains(t, counts, "DEAD\n2")
	require.Contains(t, counts, "RUNNING\n1")
	boxes := eval[int](h, tab, `document.querySelectorAll("#wf-graph g.box").length`)
	require.LessOrEqual(t, boxes, 8, "a few boxes, not 1,000")
	require.Equal(t, 1000, eval[int](h, tab, `[...document.querySelectorAll("#wf-graph g.box text.sub")].map(t => {
		const m = t.textContent.match(/^×(\d+)/); return m ? +m[1] : 1 }).reduce((a, b) => a + b, 0)`), "every task is in a box")
	width := eval[float64](h, tab, `document.querySelector("#wf-graph").getBoundingClientRect().width`)
	require.Less(t, width, 1280.0, "it fits the page's width")
	labels := eval[string](h, tab, `document.querySelector("#wf-graph").textContent`)
	for _, want := range []string{"ui-wf-kids", "×948 · PENDING", "×49 · DONE", "ui-wf-join"} {
		require.Contains(t, labels, want)
	}
	require.True(t, strings.Contains(eval[string](h, tab, `document.querySelector("#wf-graph line.skip") ? "dashed" : ""`), "dashed"),
		"edges under skip are dashed")
	h.screenshot(tab, "workflow")

	// The join's page lists its first 100 parents, and counts the rest.
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/tasks/"+join), chromedp.WaitVisible(chromedp.CSS(`#more-parents`)))
	require.Contains(t, h.text(tab, "#more-parents"), "And 898 more")
	require.Equal(t, 100, eval[int](h, tab, `document.querySelectorAll("#more-parents").length && document.querySelector("#more-parents").previousElementSibling.querySelectorAll("li").length`))
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/workflows/"+root.ID), chromedp.WaitVisible(chromedp.CSS(`#wf-graph`)))

	// Cancel the run from its page.
	h.run(tab, chromedp.Click(chromedp.CSS(`form[action$="/cancel"] button`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	require.Contains(t, h.text(tab, ".flash"), "949 task(s) cancelled or asked to stop")
	require.Equal(t, "RUNNING", c.Get(root.ID).Status)
	require.NotNil(t, c.Get(root.ID).CancelRequestedAt)

	// Dead letters: the failure apart from the cancelled and the skipped.
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/dead"), chromedp.WaitVisible(chromedp.CSS(`#dead-not-run`)))
	failed := h.text(tab, `#dead-failed + .scroll`)
	require.Contains(t, failed, "non_retryable")
	require.NotContains(t, failed, "dependency_skipped")
	notRun := h.text(tab, `#dead-not-run + .scroll`)
	require.Contains(t, notRun, "dependency_skipped")
	require.Contains(t, notRun, "cancelled")
	require.NotContains(t, notRun, "non_retryable")
}
