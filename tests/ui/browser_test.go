// Package ui_test drives the dashboard in a real headless Chromium (the
// one installed on the machine; nothing is downloaded) against the real
// server on a throwaway database.
package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// browserPath finds Chromium: TASKMASTER_BROWSER, /usr/bin/chromium, or
// chromium / chromium-browser / google-chrome on PATH. Without one the
// tests skip, unless TASKMASTER_REQUIRE_BROWSER is set (CI), where they
// fail.
func browserPath(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("TASKMASTER_BROWSER"), "/usr/bin/chromium"}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			candidates = append(candidates, p)
		}
	}
	for _, p := range candidates {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	if os.Getenv("TASKMASTER_REQUIRE_BROWSER") != "" {
		t.Fatal("no Chromium found (/usr/bin/chromium or chromium on PATH) and TASKMASTER_REQUIRE_BROWSER is set: apt-get install -y chromium")
	}
	t.Skip("browser tests skipped: no Chromium found (install Debian's chromium, or set TASKMASTER_BROWSER)")
	return ""
}

// harness is a server, API clients and a browser.
type harness struct {
	t      *testing.T
	srv    *testserver.Server
	admin  *testclient.Client
	token  string // admin key
	read   string // read key
	alloc  context.Context
	tab    context.Context
	shots  string // screenshot directory, "" when not asked
	cancel []context.CancelFunc
}

func setup(t *testing.T, auth bool) *harness { return setupWith(t, auth, nil) }

// setupWith is setup with the server's configuration adjusted by mutate.
func setupWith(t *testing.T, auth bool, mutate func(*app.Config)) *harness {
	t.Helper()
	bin := browserPath(t)
	srv := testserver.Start(t, func(c *app.Config) {
		if auth {
			c.HTTP.Auth = httpadapter.AuthOn
		} else {
			c.HTTP.Auth = httpadapter.AuthOff
		}
		if mutate != nil {
			mutate(c)
		}
	})
	h := &harness{t: t, srv: srv}
	h.admin = testclient.New(t, srv.URL)
	if auth {
		h.token = srv.AdminKey(t)
		_, h.read = srv.CreateKey(t, apikey.CreateParams{Name: "viewer", Scopes: []apikey.Scope{apikey.ScopeRead}})
		h.admin = h.admin.WithKey(h.token)
	}
	if os.Getenv("TASKMASTER_UI_SCREENSHOTS") == "1" {
		h.shots = filepath.Join("..", "..", "docs", "dashboard")
		require.NoError(t, os.MkdirAll(h.shots, 0o755))
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Headless,
		chromedp.WindowSize(1280, 800), chromedp.Flag("disable-dev-shm-usage", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	h.alloc = alloc
	h.cancel = append(h.cancel, cancelAlloc)
	h.tab = h.newBrowser()
	t.Cleanup(func() {
		for i := len(h.cancel) - 1; i >= 0; i-- {
			h.cancel[i]()
		}
	})
	return h
}

// newBrowser starts a browser (its own cookie jar) and returns its tab.
func (h *harness) newBrowser() context.Context {
	ctx, cancel := chromedp.NewContext(h.alloc)
	h.cancel = append(h.cancel, cancel)
	require.NoError(h.t, chromedp.Do(ctx), "start Chromium")
	return ctx
}

// run runs browser actions with a deadline.
func (h *harness) run(tab context.Context, actions ...chromedp.Action[chromedp.Void]) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	require.NoError(h.t, chromedp.Do(ctx, actions...))
}

// eval evaluates a JavaScript expression (awaiting a promise) in the tab.
func eval[T any](h *harness, tab context.Context, expr string) T {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	require.NoError(h.t, err)
	return v
}

// text returns the text of the first element matching sel.
func (h *harness) text(tab context.Context, sel string) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(h.t, err)
	return s
}

func (h *harness) login(tab context.Context, token string) {
	h.t.Helper()
	h.run(tab,
		chromedp.Navigate(h.srv.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#api_key")),
		chromedp.SendKeys(chromedp.CSS("#api_key"), token),
		chromedp.Submit(chromedp.CSS("#api_key")),
		chromedp.WaitVisible(chromedp.CSS(`form.filters`)),
	)
}

// screenshot saves the page at desktop and phone width when asked.
func (h *harness) screenshot(tab context.Context, name string) {
	h.t.Helper()
	if h.shots == "" {
		return
	}
	for _, size := range []struct {
		suffix        string
		width, height int64
		mobile        bool
	}{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}} {
		opts := []chromedp.EmulateViewportOption{}
		if size.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		h.run(tab, chromedp.EmulateViewport(size.width, size.height, opts...),
			chromedp.Sleep(150*time.Millisecond)) // layout after the resize
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		cancel()
		require.NoError(h.t, err)
		require.NoError(h.t, os.WriteFile(filepath.Join(h.shots, name+"-"+size.suffix+".png"), png, 0o644))
	}
	h.run(tab, chromedp.EmulateViewport(1280, 800))
}

// deadTask submits a task to queue and cancels it: DEAD (cancelled).
func (h *harness) deadTask(queue string) string {
	h.t.Helper()
	tk := h.admin.Submit(map[string]any{"queue": queue, "payload": map[string]any{"to": "ada@example.com", "n": 1}})
	h.admin.Do(http.MethodPost, "/tasks/v1/"+tk.ID+"/cancel", nil).Expect(h.t, http.StatusOK, nil)
	return tk.ID
}

// stageHistory gives the screenshots' queues an hour of per-minute counts
// (what the statistics projection would hold after an hour of traffic), so
// the charts have a shape to show. Only for screenshots: the assertions
// never look at the charts.
func (h *harness) stageHistory() {
	if h.shots == "" {
		return
	}
	_, err := h.srv.DB.Exec(`
		INSERT INTO queue_rate_buckets (queue, minute, kind, count)
		SELECT q, date_trunc('minute', now()) - m * interval '1 minute', k,
			greatest(0, (CASE k WHEN 'dead_lettered' THEN 2 ELSE 40 END) * (1.2 + sin(m / 8.0 + length(q))) + (m * 7 + length(k)) % 5)::int
		FROM unnest(ARRAY['emails', 'reports']) q, generate_series(1, 59) m,
			unnest(ARRAY['enqueued', 'claimed', 'completed', 'dead_lettered']) k`)
	require.NoError(h.t, err)
}

func (h *harness) status(id string) string { return string(h.admin.Get(id).Status) }

// crossSiteRetryRefused has a page on another origin post a retry of a new
// DEAD task of queue to the dashboard, with the browser's cookie and a
// guessed token, and requires it refused with the task unchanged; it
// returns the task's id.
func (h *harness) crossSiteRetryRefused(tab context.Context, queue string) string {
	h.t.Helper()
	victim := h.deadTask(queue)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<form id="f" method="post" action="%s/ui/tasks/%s/retry"><input name="csrf" value="guess"></form>
			<script>document.getElementById("f").submit()</script>`, h.srv.URL, victim)
	}))
	defer evil.Close()
	h.run(tab, chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.CSS(`p.error`)))
	require.Contains(h.t, h.text(tab, "p.error"), "Refused")
	require.Equal(h.t, "DEAD", h.status(victim))
	return victim
}

// The dashboard with authentication on: login, live overview, task page,
// retry, bulk cancel after confirmation, a read key that cannot act, and a
// cross-site form refused.
func TestDashboard(t *testing.T) {
	h := setup(t, true)
	tab := h.tab

	h.stageHistory()

	// Log in: the overview asks for a key first.
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#api_key")))
	h.screenshot(tab, "login")
	h.login(tab, h.token)
	require.Contains(t, h.text(tab, "header"), "admin")

	// A task submitted now appears on the overview without a reload: mark
	// the page, submit, wait for the row, check the mark survived.
	eval[int](h, tab, `window.__noReload = 1`)
	submitted := h.admin.Submit(map[string]any{"queue": "emails", "payload": map[string]any{"to": "ada@example.com"}})
	h.run(tab, chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="emails"]`)))
	mark := eval[int](h, tab, `window.__noReload || 0`)
	require.Equal(t, 1, mark, "the overview reloaded instead of updating in place")
	require.Contains(t, h.text(tab, `tr[data-queue="emails"]`), "emails")

	// Open it: queue page, then the task.
	h.run(tab, chromedp.Click(chromedp.CSS(`tr[data-queue="emails"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/tasks/`+submitted.ID+`"]`)))
	h.screenshot(tab, "queue")
	h.run(tab, chromedp.Click(chromedp.CSS(`a[href="/ui/tasks/`+submitted.ID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`pre.json`)))
	require.Contains(t, h.text(tab, "pre.json"), `"to": "ada@example.com"`)
	require.Contains(t, h.text(tab, "h1"), submitted.ID)

	// Retry a dead task from its page.
	dead := h.deadTask("emails")
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/tasks/"+dead), chromedp.WaitVisible(chromedp.CSS(`form[action$="/retry"] button`)))
	h.screenshot(tab, "task")
	h.run(tab, chromedp.Click(chromedp.CSS(`form[action$="/retry"] button`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	require.Equal(t, "PENDING", h.status(dead))

	// Bulk cancel: select two tasks, see the count, confirm.
	a := h.admin.Submit(map[string]any{"queue": "reports", "payload": map[string]any{"n": 1}})
	b := h.admin.Submit(map[string]any{"queue": "reports", "payload": map[string]any{"n": 2}})
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/queues/reports"),
		chromedp.Click(chromedp.CSS(`input[value="`+a.ID+`"]`)),
		chromedp.Click(chromedp.CSS(`input[value="`+b.ID+`"]`)),
		chromedp.Click(chromedp.CSS(`button[name="action"][value="cancel"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-count`)))
	require.Equal(t, "2", h.text(tab, "#confirm-count"))
	require.Equal(t, "PENDING", h.status(a.ID), "nothing changes before the confirmation")
	h.run(tab, chromedp.Click(chromedp.CSS(`button.danger`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	require.Contains(t, h.text(tab, ".flash"), "2 task(s) changed")
	require.Equal(t, "DEAD", h.status(a.ID))
	require.Equal(t, "DEAD", h.status(b.ID))

	// Bulk cancel by filter: every PENDING task of the queue whose key
	// contains "batch-", counted by a dry run before anything changes.
	var batch []string
	for i := range 3 {
		batch = append(batch, h.admin.Submit(map[string]any{"queue": "imports", "idempotency_key": fmt.Sprintf("batch-%d", i),
			"payload": map[string]any{"file": i}}).ID)
	}
	other := h.admin.Submit(map[string]any{"queue": "imports", "idempotency_key": "manual-1", "payload": map[string]any{}}).ID
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/queues/imports?status=PENDING&text=batch-"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="scope"][value="filter"]`)),
		chromedp.Click(chromedp.CSS(`input[name="scope"][value="filter"]`)),
		chromedp.Click(chromedp.CSS(`button[name="action"][value="cancel"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-count`)))
	require.Equal(t, "3", h.text(tab, "#confirm-count"))
	h.screenshot(tab, "confirm")
	for _, id := range batch {
		require.Equal(t, "PENDING", h.status(id), "the count changes nothing")
	}
	h.run(tab, chromedp.Click(chromedp.CSS(`button.danger`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	require.Contains(t, h.text(tab, ".flash"), "3 task(s) changed")
	for _, id := range batch {
		require.Equal(t, "DEAD", h.status(id))
	}
	require.Equal(t, "PENDING", h.status(other), "a task the filter does not match stays")

	// Dead letters: retry a whole group (queue and reason), after the count.
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/dead"),
		chromedp.Click(chromedp.CSS(`button[aria-label="Retry the 3 DEAD tasks of imports (cancelled)"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-count`)))
	require.Equal(t, "3", h.text(tab, "#confirm-count"))
	h.run(tab, chromedp.Click(chromedp.CSS(`button.danger`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	for _, id := range batch {
		require.Equal(t, "PENDING", h.status(id))
	}

	// Pause a queue from its page: a worker's claim gets nothing; resume,
	// and the same claim gets the task.
	h.admin.Register(map[string]any{"id": "w-pause", "queues": []string{"jobs"}})
	job := h.admin.Submit(map[string]any{"queue": "jobs", "payload": map[string]any{"n": 1}})
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/queues/jobs"),
		chromedp.Click(chromedp.CSS(`button[name="op"][value="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	require.Contains(t, h.text(tab, "h1"), "paused")
	h.screenshot(tab, "queue-paused")
	require.Empty(t, h.admin.Claim(map[string]any{"worker_id": "w-pause", "limit": 10}), "a paused queue hands out nothing")
	require.Empty(t, h.admin.Claim(map[string]any{"worker_id": "w-pause", "limit": 10}), "still nothing on a second claim")
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/queues/jobs"),
		chromedp.Click(chromedp.CSS(`button[name="op"][value="resume"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	claimed := h.admin.Claim(map[string]any{"worker_id": "w-pause", "limit": 10})
	require.Len(t, claimed, 1)
	require.Equal(t, job.ID, claimed[0].ID)

	// Limits: set a cap and a rate limit, then clear the cap.
	h.saveLimits(tab, "jobs", `.flash`, chromedp.SendKeys(chromedp.CSS(`#s-mr`), "5"),
		chromedp.SendKeys(chromedp.CSS(`#s-rps`), "2.5"), chromedp.SendKeys(chromedp.CSS(`#s-burst`), "10"))
	settings := h.text(tab, "dl.settings")
	require.Contains(t, settings, "5")
	require.Contains(t, settings, "2.5/s, burst 10")

	// A rate per group and a named limit from the same form; the fields
	// saved before come back filled in and stay. A limit that does not
	// exist is refused, and nothing changes.
	h.admin.Do(http.MethodPut, "/limits/v1/tenant-api", map[string]any{"per_second": 5, "max_running": 3}).Expect(t, http.StatusCreated, nil)
	h.saveLimits(tab, "jobs", `.flash`, chromedp.SendKeys(chromedp.CSS(`#s-rpsg`), "1.5"),
		chromedp.SendKeys(chromedp.CSS(`#s-burstg`), "3"), chromedp.SendKeys(chromedp.CSS(`#s-limits`), "tenant-api"))
	settings = h.text(tab, "dl.settings")
	require.Contains(t, settings, "2.5/s, burst 10", "the queue's rate limit, filled in, is kept")
	require.Contains(t, settings, "1.5/s, burst 3, each group")
	require.Contains(t, settings, "tenant-api")
	var saved struct {
		Settings struct {
			MaxRunning *int     `json:"max_running"`
			Limits     []string `json:"limits"`
		} `json:"settings"`
	}
	h.admin.Do(http.MethodGet, "/queues/v1/jobs", nil).Expect(t, http.StatusOK, &saved)
	require.Equal(t, []string{"tenant-api"}, saved.Settings.Limits)
	require.NotNil(t, saved.Settings.MaxRunning)
	require.Equal(t, 5, *saved.Settings.MaxRunning)
	h.saveLimits(tab, "jobs", `p.error`, chromedp.SetValue(chromedp.CSS(`#s-limits`), "tenant-api, no-such-limit"))
	require.Contains(t, h.text(tab, "p.error"), "no named limit no-such-limit")
	h.admin.Do(http.MethodGet, "/queues/v1/jobs", nil).Expect(t, http.StatusOK, &saved)
	require.Equal(t, []string{"tenant-api"}, saved.Settings.Limits, "a refused form changes nothing")

	// The other pages (and their screenshots).
	h.admin.Register(map[string]any{"id": "w-1", "queues": []string{"emails"}, "tags": []string{"gpu"}})
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/workers"), chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Drain worker w-1"]`)))
	h.screenshot(tab, "workers")
	h.run(tab, chromedp.Click(chromedp.CSS(`button[aria-label="Drain worker w-1"]`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	require.Contains(t, h.text(tab, "table"), "draining")
	h.admin.Do(http.MethodPost, "/schedules/v1", map[string]any{"name": "nightly", "cron": "0 3 * * *",
		"task": map[string]any{"queue": "reports", "payload": map[string]any{}}}).Expect(t, http.StatusCreated, nil)
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/schedules"), chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Pause schedule nightly"]`)))
	h.run(tab, chromedp.Click(chromedp.CSS(`button[aria-label="Pause schedule nightly"]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Resume schedule nightly"]`)))
	h.screenshot(tab, "schedules")
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/dead"), chromedp.WaitVisible(chromedp.CSS(`table`)))
	require.Contains(t, h.text(tab, "#dead-not-run + .scroll"), "reports", "cancelled tasks are shown apart from failures")
	h.screenshot(tab, "dead")
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="reports"]`)))
	h.screenshot(tab, "overview")

	// A cross-site form (a page on another origin posting to the
	// dashboard with the browser's cookie) is refused, and nothing changes.
	victim := h.crossSiteRetryRefused(tab, "emails")
	// Same origin, with the admin's session cookie, but without the
	// session's token: refused too.
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/dead"), chromedp.WaitVisible(chromedp.CSS(`table`)))
	forged := eval[int](h, tab, `(async () => {
		const r = await fetch('/ui/tasks/`+victim+`/retry', {method: 'POST', body: new URLSearchParams({csrf: 'not-the-token'})});
		return r.status; })()`)
	require.Equal(t, http.StatusForbidden, forged)
	require.Equal(t, "DEAD", h.status(victim))

	// A read key sees everything and can act on nothing.
	reader := h.newBrowser()
	h.login(reader, h.read)
	require.Contains(t, h.text(reader, "header"), "read-only")
	h.run(reader, chromedp.Navigate(h.srv.URL+"/ui/tasks/"+victim), chromedp.WaitVisible(chromedp.CSS(`pre.json`)))
	buttons := eval[int](h, reader, `document.querySelectorAll("main form[method=post]").length`)
	require.Zero(t, buttons, "a read key's task page offers no action")
	// Even a hand-made POST with the session's own CSRF token is refused.
	status := eval[int](h, reader, `(async () => {
		const csrf = document.querySelector('header input[name=csrf]').value;
		const r = await fetch('/ui/tasks/`+victim+`/retry', {method: 'POST', body: new URLSearchParams({csrf})});
		return r.status; })()`)
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "DEAD", h.status(victim))

	// Logging out ends the session.
	h.run(reader, chromedp.Click(chromedp.CSS(`header button`)), chromedp.WaitVisible(chromedp.CSS("#api_key")))
	h.run(reader, chromedp.Navigate(h.srv.URL+"/ui/workers"), chromedp.WaitVisible(chromedp.CSS("#api_key")))
	require.True(t, strings.HasPrefix(h.location(reader), h.srv.URL+"/ui/login"))
}

func (h *harness) location(tab context.Context) string {
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(h.t, err)
	return loc
}

// With authentication off there is no login: the pages open at once, an
// action works (its CSRF token is a double-submit cookie), and a
// cross-site form is still refused.
func TestDashboardWithoutAuth(t *testing.T) {
	h := setup(t, false)
	tab := h.tab
	dead := h.deadTask("open")
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/tasks/"+dead),
		chromedp.WaitVisible(chromedp.CSS(`form[action$="/retry"] button`)))
	require.NotContains(t, h.text(tab, "header"), "Log out")
	h.run(tab, chromedp.Click(chromedp.CSS(`form[action$="/retry"] button`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	require.Equal(t, "PENDING", h.status(dead))
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/login"), chromedp.WaitVisible(chromedp.CSS(`form.filters`)))
	// "/ui" as people type it lands on the overview.
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui"), chromedp.WaitVisible(chromedp.CSS(`form.filters`)))
	require.Equal(t, h.srv.URL+"/ui/", h.location(tab))

	h.crossSiteRetryRefused(tab, "open")

	// A running task's progress shows as a bar on its queue's page and on
	// its own, with its metadata and time limit.
	running := h.admin.Submit(map[string]any{"queue": "progressing", "timeout_seconds": 600,
		"metadata": map[string]any{"tenant": "acme"}})
	h.admin.Register(map[string]any{"id": "ui-w"})
	held := h.admin.Claim(map[string]any{"worker_id": "ui-w", "queue": "progressing"})
	require.Len(t, held, 1)
	h.admin.Do(http.MethodPost, "/tasks/v1/"+running.ID+"/progress", map[string]any{"worker_id": "ui-w",
		"lease_id": held[0].Lease(), "percent": 40, "message": "4 of 10"}).Expect(t, http.StatusOK, nil)
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/queues/progressing"), chromedp.WaitVisible(chromedp.CSS(`progress.bar`)))
	require.Equal(t, "40", eval[string](h, tab, `document.querySelector("progress.bar").getAttribute("value")`))
	require.Contains(t, h.text(tab, `#leased-h + .scroll`), "4 of 10")
	h.run(tab, chromedp.Navigate(h.srv.URL+"/ui/tasks/"+running.ID), chromedp.WaitVisible(chromedp.CSS(`progress.bar`)))
	fields := h.text(tab, "dl.fields")
	require.Contains(t, fields, "40%")
	require.Contains(t, fields, "4 of 10")
	require.Contains(t, fields, "tenant")
	require.Contains(t, fields, "acme")
	require.Contains(t, fields, "600 s per attempt")
}

// saveLimits opens queue's Edit-limits form, fills it in with fill, saves
// it, and waits for the page that follows to show until (the flash, or the
// error).
func (h *harness) saveLimits(tab context.Context, queue, until string, fill ...chromedp.Action[chromedp.Void]) {
	h.t.Helper()
	actions := append([]chromedp.Action[chromedp.Void]{chromedp.Navigate(h.srv.URL + "/ui/queues/" + queue), chromedp.Click(chromedp.CSS(`details summary`))}, fill...)
	h.run(tab, append(actions, chromedp.Click(chromedp.CSS(`button[name="op"][value="limits"]`)), chromedp.WaitVisible(chromedp.CSS(until)))...)
}
