package ui

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// queueRow is one queue of the overview.
type queueRow struct {
	ports.QueueStats
	Paused bool
	Series ports.RateSeries
}

type overviewData struct {
	Filter string
	// ByName: every queue by name, a page at a time; else the busiest
	// queues first.
	ByName bool
	Rows   []queueRow
	Shown  int
	AsOf   string
	// Next continues the listing by name (empty: the last page).
	Next string
	// Page is the most queues a page shows.
	Page int
}

// overview lists a bounded page of queues with their projected statistics
// (no scan of the tasks table) and per-minute series: by default the
// busiest queues of the last minutes first, then the others by name up to
// a page; with sort=name every queue by name, a page at a time (after=).
// The name filter applies to both. However many queues there are, a page
// (and its live refresh) reads and renders overviewPage of them.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	data, err := h.overviewData(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "overview", page{Title: "Queues", Nav: "overview", Data: data})
}

func (h *Handler) overviewData(r *http.Request) (overviewData, error) {
	ctx := r.Context()
	rd := h.reads(r)
	q := r.URL.Query()
	filter := strings.TrimSpace(q.Get("q"))
	data := overviewData{Filter: filter, ByName: q.Get("sort") == "name", Page: overviewPage}
	pattern := ""
	if filter != "" {
		pattern = "*" + filter + "*"
	}
	limit := overviewPage
	var (
		stats []ports.QueueStats
		err   error
	)
	if data.ByName {
		var p ports.QueuePage
		p, err = rd.Queues.Queues(ctx, ports.QueueQuery{Pattern: pattern, Limit: &limit, After: q.Get("after"), CountsOnly: true})
		stats = p.Queues
		if err == nil && p.More && len(p.Queues) > 0 {
			data.Next = p.Queues[len(p.Queues)-1].Queue
		}
	} else {
		stats, err = h.busiestQueues(ctx, rd, pattern)
	}
	var ve *validation.Error
	switch {
	case errors.As(err, &ve):
		return data, &pageError{status: http.StatusUnprocessableEntity,
			msg: "The filter may hold only the characters of queue names (letters, digits, and . _ : -)."}
	case err != nil:
		return data, err
	}
	names := make([]string, len(stats))
	for i, qs := range stats {
		names[i] = qs.Queue
		data.Rows = append(data.Rows, queueRow{QueueStats: qs, Paused: qs.Settings.Paused})
		if qs.StatsAsOf != nil && (data.AsOf == "" || fmtTime(*qs.StatsAsOf) > data.AsOf) {
			data.AsOf = fmtTime(*qs.StatsAsOf)
		}
	}
	series, err := rd.Dashboard.RateSeries(ctx, names)
	if err != nil {
		return data, err
	}
	data.Shown = len(data.Rows)
	for i := range data.Rows {
		data.Rows[i].Series = orEmpty(series[data.Rows[i].Queue])
	}
	return data, nil
}

// busiestQueues returns the statistics of the busiest queues matching
// pattern (the most events in the last minutes first), then of the first
// others by name, overviewPage in all.
func (h *Handler) busiestQueues(ctx context.Context, rd Reads, pattern string) ([]ports.QueueStats, error) {
	busy, err := rd.Dashboard.ActiveQueues(ctx, pattern, overviewPage)
	if err != nil {
		return nil, err
	}
	var out []ports.QueueStats
	if len(busy) > 0 {
		p, err := rd.Queues.Queues(ctx, ports.QueueQuery{Names: busy, CountsOnly: true})
		if err != nil {
			return nil, err
		}
		out = p.Queues
	}
	if len(out) >= overviewPage {
		return out[:overviewPage], nil
	}
	limit := overviewPage
	rest, err := rd.Queues.Queues(ctx, ports.QueueQuery{Pattern: pattern, Limit: &limit, CountsOnly: true})
	if err != nil {
		return nil, err
	}
	shown := make(map[string]bool, len(out))
	for _, qs := range out {
		shown[qs.Queue] = true
	}
	for _, qs := range rest.Queues {
		if len(out) == overviewPage {
			break
		}
		if !shown[qs.Queue] {
			out = append(out, qs)
		}
	}
	return out, nil
}

// overviewPage is the most queues an overview page shows.
const overviewPage = 100

// orEmpty gives a queue without buckets an hour of zeros.
func orEmpty(s ports.RateSeries) ports.RateSeries {
	if s.Enqueued == nil {
		z := make([]int64, seriesMinutes)
		return ports.RateSeries{Enqueued: z, Claimed: z, Completed: z, DeadLettered: z}
	}
	return s
}

// seriesMinutes is the length of the series (application.SeriesMinutes).
const seriesMinutes = 60

// pageSize is the task listings' page size.
const pageSize = 50

// queueData is the queue page.
type queueData struct {
	Stats queueRow
	// Known: the queue holds tasks or has settings.
	Known        bool
	Settings     queue.Settings
	Leased       int64
	LeasedSample []ports.LeasedTask
	Averages     []ports.QueueAverage
	// Deliveries are a push queue's recent deliveries (nil: none).
	Deliveries *ports.DeliverySummary
	Tasks      []*task.Task
	Next       string
	Filter     taskFilter
	queueExtra
}

// taskFilter is the queue page's task filter, as the form sent it.
type taskFilter struct {
	Status, Group, DeadReason, CreatedAfter, CreatedBefore, Text, After string
}

func taskFilterOf(r *http.Request) taskFilter {
	q := r.URL.Query()
	if r.Method == http.MethodPost {
		q = r.PostForm
	}
	get := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	return taskFilter{Status: get("status"), Group: get("group"), DeadReason: get("dead_reason"),
		CreatedAfter: get("created_after"), CreatedBefore: get("created_before"), Text: get("text"), After: get("after")}
}

func (h *Handler) queuePage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("queue")
	data := queueData{Stats: queueRow{QueueStats: ports.QueueStats{Queue: name}}, Filter: taskFilterOf(r)}
	d, err := h.reads(r).Queues.Queue(ctx, name)
	switch {
	case errors.Is(err, queue.ErrNotFound):
	case err != nil:
		h.fail(w, r, err)
		return
	default:
		data.Known = true
		data.Stats.QueueStats, data.Stats.Paused = d.QueueStats, d.Settings.Paused
		data.Settings, data.Leased, data.LeasedSample, data.Averages = d.Settings, d.Leased, d.LeasedSample, d.Averages
		data.Deliveries = d.Deliveries
	}
	series, err := h.reads(r).Dashboard.RateSeries(ctx, []string{name})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	data.Stats.Series = orEmpty(series[name])
	if err := h.queueTasks(r, name, &data); err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "queue", page{Title: "Queue " + name, Nav: "overview", Data: data})
}

// taskAction is a retry or cancel of one task.
func (h *Handler) taskAction(w http.ResponseWriter, r *http.Request, do func(*http.Request, uuid.UUID) (*task.Task, error), code string) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.fail(w, r, &pageError{status: http.StatusNotFound, msg: "Task not found."})
		return
	}
	if _, err := do(r, id); err != nil {
		h.fail(w, r, err)
		return
	}
	redirectDone(w, r, "/ui/tasks/"+id.String(), code)
}

func (h *Handler) retryTask(w http.ResponseWriter, r *http.Request) {
	h.taskAction(w, r, func(r *http.Request, id uuid.UUID) (*task.Task, error) { return h.d.Tasks.Retry(r.Context(), id) }, "retried")
}

func (h *Handler) cancelTask(w http.ResponseWriter, r *http.Request) {
	h.taskAction(w, r, func(r *http.Request, id uuid.UUID) (*task.Task, error) { return h.d.Tasks.Cancel(r.Context(), id) }, "cancelled")
}

// maxShownJSON is how much of a payload or result the task page shows; the
// whole value is a download.
const maxShownJSON = 32 << 10

// jsonView is a payload or result on the task page.
type jsonView struct {
	Text      string
	Size      int
	Truncated bool
}

func jsonViewOf(raw json.RawMessage) *jsonView {
	if len(raw) == 0 {
		return nil
	}
	v := &jsonView{Size: len(raw)}
	b := indentPrefix(raw, maxShownJSON+1)
	if !json.Valid(raw) {
		b = raw[:min(len(raw), maxShownJSON+1)]
	}
	text := string(b)
	if len(text) > maxShownJSON {
		cut := maxShownJSON
		for cut > 0 && !utf8Start(text[cut]) {
			cut--
		}
		text, v.Truncated = text[:cut]+"\n…", true
	}
	v.Text = text
	return v
}

// indentPrefix returns the first limit bytes (at most) of raw, a valid JSON
// text, indented as json.Indent(dst, raw, "", "  ") indents it, without
// indenting the rest: indenting multiplies the size of a deep value by its
// depth (1 MiB nested 500 levels deep is 500 MB indented), and the page
// shows maxShownJSON of it.
func indentPrefix(raw []byte, limit int) []byte {
	out := make([]byte, 0, min(limit, 2*len(raw)+64))
	depth := 0
	newline := func() {
		out = append(out, '\n')
		for range depth {
			out = append(out, ' ', ' ')
		}
	}
	inString, escaped := false, false
	for i := 0; i < len(raw) && len(out) < limit; i++ {
		c := raw[i]
		if inString {
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			inString = true
			out = append(out, c)
		case '{', '[':
			out = append(out, c)
			j := i + 1
			for j < len(raw) && (raw[j] == ' ' || raw[j] == '\t' || raw[j] == '\n' || raw[j] == '\r') {
				j++
			}
			if j < len(raw) && (raw[j] == '}' || raw[j] == ']') {
				out = append(out, raw[j]) // an empty object or array stays on its line
				i = j
				continue
			}
			depth++
			newline()
		case '}', ']':
			depth--
			newline()
			out = append(out, c)
		case ',':
			out = append(out, c)
			newline()
		case ':':
			out = append(out, ':', ' ')
		default:
			out = append(out, c)
		}
	}
	return out[:min(len(out), limit)]
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

type taskData struct {
	Task      task.Snapshot
	Payload   *jsonView
	Result    *jsonView
	Attempts  []task.Attempt
	DependsOn []uuid.UUID
	BlockedBy []uuid.UUID
	// MoreParents counts the parents beyond the first shownParents, which
	// the page leaves out (a join may have 10,000).
	MoreParents int
	CanRetry    bool
	CanCancel   bool
}

// shownParents is the most parents a task page lists.
const shownParents = 100

func (h *Handler) taskPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.fail(w, r, &pageError{status: http.StatusNotFound, msg: "Task not found."})
		return
	}
	detail, err := h.reads(r).Tasks.Describe(ctx, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	attempts, err := h.reads(r).Tasks.Attempts(ctx, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	s := detail.Task.Snapshot()
	slices.Reverse(attempts) // newest first
	data := taskData{Task: s, Payload: jsonViewOf(s.Payload), Result: jsonViewOf(s.Result), Attempts: attempts,
		DependsOn: detail.DependsOn, BlockedBy: detail.BlockedBy,
		CanRetry:  s.Status == task.StatusDead,
		CanCancel: s.Status == task.StatusPending || s.Status == task.StatusBlocked || (s.Status == task.StatusRunning && s.CancelRequestedAt == nil)}
	if n := len(data.DependsOn); n > shownParents {
		data.DependsOn, data.MoreParents = data.DependsOn[:shownParents], n-shownParents
	}
	h.render(w, r, http.StatusOK, "task", page{Title: "Task " + s.ID.String(), Nav: "overview", Data: data})
}

// taskDownload serves a task's whole payload or result as a JSON file.
func (h *Handler) taskDownload(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	part := r.PathValue("part")
	if err != nil || (part != "payload.json" && part != "result.json") {
		h.fail(w, r, &pageError{status: http.StatusNotFound, msg: "No page has this address."})
		return
	}
	t, err := h.d.Tasks.Get(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	body := t.Snapshot().Payload
	if part == "result.json" {
		body = t.Snapshot().Result
	}
	if body == nil {
		body = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="`+id.String()+"-"+part+`"`)
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

type workerRow struct {
	worker.Snapshot
	Held      int64
	Heartbeat time.Duration
}

func (h *Handler) workersPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ws, err := h.reads(r).Workers.List(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	held, err := h.reads(r).Dashboard.HeldCounts(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rows := make([]workerRow, len(ws))
	for i, wk := range ws {
		s := wk.Snapshot()
		rows[i] = workerRow{Snapshot: s, Held: held[s.ID], Heartbeat: time.Since(s.LastHeartbeatAt)}
	}
	h.render(w, r, http.StatusOK, "workers", page{Title: "Workers", Nav: "workers", Data: rows})
}

func (h *Handler) drainWorker(w http.ResponseWriter, r *http.Request) {
	if _, err := h.d.Workers.Drain(r.Context(), r.PathValue("id")); err != nil {
		h.fail(w, r, err)
		return
	}
	redirectDone(w, r, "/ui/workers", "drained")
}

func (h *Handler) schedulesPage(w http.ResponseWriter, r *http.Request) {
	var rows []schedule.Snapshot
	if h.d.Schedules != nil {
		all, err := h.reads(r).Schedules.List(r.Context())
		if err != nil {
			h.fail(w, r, err)
			return
		}
		for _, s := range all {
			rows = append(rows, s.Snapshot())
		}
	}
	h.render(w, r, http.StatusOK, "schedules", page{Title: "Schedules", Nav: "schedules", Data: rows})
}

// limitsPage lists the named limits, with the queues naming each.
func (h *Handler) limitsPage(w http.ResponseWriter, r *http.Request) {
	var rows []ports.LimitInfo
	if h.d.NamedLimits != nil {
		var err error
		if rows, err = h.d.NamedLimits.List(r.Context()); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	h.render(w, r, http.StatusOK, "limits", page{Title: "Limits", Nav: "limits", Data: rows})
}

func (h *Handler) scheduleAction(w http.ResponseWriter, r *http.Request) {
	var paused bool
	switch r.PathValue("action") {
	case "pause":
		paused = true
	case "resume":
	default:
		h.fail(w, r, &pageError{status: http.StatusNotFound, msg: "No page has this address."})
		return
	}
	if h.d.Schedules == nil {
		h.fail(w, r, schedule.ErrNotFound)
		return
	}
	if _, err := h.d.Schedules.Patch(r.Context(), r.PathValue("name"), schedule.PatchParams{Paused: &paused}); err != nil {
		h.fail(w, r, err)
		return
	}
	redirectDone(w, r, "/ui/schedules", r.PathValue("action")+"d")
}

type deadData struct {
	// Failures are the groups of tasks that failed; NotRun those of tasks
	// stopped without running (task.DeadReason.Failure false).
	Failures, NotRun []ports.DeadCount
	Total            int64
	queueExtra
}

// deadTableView is one table of the dead letters page.
type deadTableView struct {
	Groups    []ports.DeadCount
	Act, Bulk bool
	CSRF      string
	Empty     string
}

func (h *Handler) deadPage(w http.ResponseWriter, r *http.Request) {
	groups, err := h.reads(r).Dashboard.DeadCounts(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	data := deadData{queueExtra: queueExtra{BulkByFilter: h.d.Bulk != nil}}
	for _, g := range groups {
		data.Total += g.Count
		if task.DeadReason(g.Reason).Failure() {
			data.Failures = append(data.Failures, g)
		} else {
			data.NotRun = append(data.NotRun, g)
		}
	}
	h.render(w, r, http.StatusOK, "dead", page{Title: "Dead letters", Nav: "dead", Data: data})
}
