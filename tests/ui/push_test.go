package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/push"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

// waitText polls the text of sel until it contains want (the live regions
// refresh every two seconds).
func (h *harness) waitText(tab context.Context, sel, want string) string {
	h.t.Helper()
	var got string
	testclient.Poll(h.t, 20*time.Second, sel+" showing "+want, func() bool {
		// The live refresh replaces the region's nodes: a read that finds
		// the node it resolved gone is read again.
		ctx, cancel := context.WithTimeout(tab, 5*time.Second)
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			return false
		}
		got = s
		return strings.Contains(got, want)
	})
	return got
}

// A push queue's page shows its endpoint (host only), the deliveries in
// flight, the recent statuses and latency, refreshing in place; its
// settings name the static headers without their values; the task page
// shows each attempt's HTTP status; the limits page lists the named
// limits and the queues naming them; the overview marks push queues.
func TestDashboardPushQueuesAndLimits(t *testing.T) {
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "fail") {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "mailbox full")
			return
		}
		_, _ = io.WriteString(w, `{"sent":true}`)
	}))
	defer ep.Close()
	h := setupWith(t, true, func(c *app.Config) {
		allow, err := push.ParseAllowList("127.0.0.1")
		require.NoError(t, err)
		c.Push.AllowedHosts, c.Push.Refresh = allow, 50*time.Millisecond
	})
	tab := h.tab
	host := strings.TrimPrefix(ep.URL, "http://")
	h.admin.Do(http.MethodPatch, "/queues/v1/webhooks", map[string]any{"push": map[string]any{
		"url": ep.URL + "/hooks?token=s3cr3t", "headers": map[string]any{"Authorization": "Bearer hidden-value"}, "max_in_flight": 4,
	}}).Expect(t, http.StatusOK, nil)
	h.admin.Do(http.MethodPut, "/limits/v1/tenant-api", map[string]any{"per_second": 5, "max_running": 3}).Expect(t, http.StatusCreated, nil)
	h.admin.Do(http.MethodPatch, "/queues/v1/crm", map[string]any{"limits": []string{"tenant-api"}}).Expect(t, http.StatusOK, nil)
	h.stageHistory()

	h.login(tab, h.token)
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/queues/webhooks"), chromedp.WaitVisible(chromedp.CSS(`[data-push-host]`)))
	require.Equal(t, host, h.text(tab, `[data-push-host]`), "the endpoint's host, not its path or query")
	require.Contains(t, h.text(tab, `[data-push-statuses]`), "No delivery")
	eval[int](h, tab, `window.__noReload = 1`)

	var failed string
	for i := range 3 {
		payload := map[string]any{"n": i}
		if i == 2 {
			payload["fail"] = true
		}
		tk := h.admin.Submit(map[string]any{"queue": "webhooks", "payload": payload, "max_attempts": 1})
		if i == 2 {
			failed = tk.ID
		}
	}
	statuses := h.waitText(tab, `[data-push-statuses]`, "500 ×1")
	require.Contains(t, statuses, "200 ×2")
	require.Equal(t, 1, eval[int](h, tab, `window.__noReload || 0`), "the figures refreshed in place")
	require.Contains(t, h.text(tab, `section.push`), "Latency p99")
	settings := h.text(tab, "dl.settings")
	require.Contains(t, settings, "to "+host)
	require.Contains(t, settings, "Authorization (values hidden)")
	page := eval[string](h, tab, `document.documentElement.outerHTML`)
	require.NotContains(t, page, "hidden-value")
	require.NotContains(t, page, "s3cr3t")
	h.screenshot(tab, "queue-push")

	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/tasks/"+failed), chromedp.WaitVisible(chromedp.CSS(`table.attempts`)))
	attempts := h.text(tab, `table.attempts tbody`)
	require.Contains(t, attempts, "500")
	require.Contains(t, attempts, "HTTP 500: mailbox full")

	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/limits"), chromedp.WaitVisible(chromedp.CSS(`tr#limit-tenant-api`)))
	row := h.text(tab, `tr#limit-tenant-api`)
	require.Contains(t, row, "5/s, burst 5")
	require.Contains(t, row, "crm")
	h.screenshot(tab, "limits")
	h.run(tab, chromedp.Click(chromedp.CSS(`tr#limit-tenant-api a`)), chromedp.WaitVisible(chromedp.CSS(`dl.settings`)))
	require.Contains(t, h.text(tab, "dl.settings"), "tenant-api")

	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="webhooks"]`)))
	require.Contains(t, h.text(tab, `tr[data-queue="webhooks"] th`), "push")
}
