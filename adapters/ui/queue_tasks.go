package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// queueExtra is what the queue page shows beyond the statistics.
type queueExtra struct {
	// BulkByFilter: actions on every task matching a filter exist.
	BulkByFilter bool
}

func (h *Handler) extraRoutes(m *http.ServeMux) {
	m.Handle("POST /ui/queues/{queue}/settings", h.act(h.queueSettings))
}

// listQuery turns the page's filter into the listing's query for queue.
// The created range is read as UTC (the inputs are datetime-local).
func (f taskFilter) listQuery(queue string) (ports.ListQuery, error) {
	q := ports.ListQuery{Queue: queue, Status: task.Status(f.Status), DeadReason: task.DeadReason(f.DeadReason),
		GroupKey: f.Group, Text: f.Text}
	var v validation.Errors
	when := func(field, raw string) *time.Time {
		if raw == "" {
			return nil
		}
		for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
			if t, err := time.ParseInLocation(layout, raw, time.UTC); err == nil {
				return &t
			}
		}
		v.Add(field, "must be a date and time (YYYY-MM-DDTHH:MM, UTC)")
		return nil
	}
	q.CreatedAfter = when("created_after", f.CreatedAfter)
	q.CreatedBefore = when("created_before", f.CreatedBefore)
	if f.After != "" {
		id, err := uuid.Parse(f.After)
		if err != nil {
			v.Add("after", "is not a page cursor")
		}
		q.After = &id
	}
	return q, v.Err()
}

// values is the filter as query parameters (without the cursor).
func (f taskFilter) values() url.Values {
	v := url.Values{}
	for k, x := range map[string]string{"status": f.Status, "group": f.Group, "dead_reason": f.DeadReason,
		"created_after": f.CreatedAfter, "created_before": f.CreatedBefore, "text": f.Text} {
		if x != "" {
			v.Set(k, x)
		}
	}
	return v
}

// queueTasks fills the queue page's task listing: a page of the queue's
// tasks matching the filter, newest first, continuing after the cursor.
func (h *Handler) queueTasks(r *http.Request, queue string, data *queueData) error {
	data.BulkByFilter = h.d.Bulk != nil
	q, err := data.Filter.listQuery(queue)
	if err != nil {
		return err
	}
	limit := pageSize
	q.Limit = &limit
	p, err := h.reads(r).Tasks.List(r.Context(), q)
	if err != nil {
		return err
	}
	data.Tasks = p.Tasks
	if p.Next != nil {
		v := data.Filter.values()
		v.Set("after", p.Next.String())
		data.Next = "?" + v.Encode()
	}
	return nil
}

// confirmData is the confirmation of an action on many tasks.
type confirmData struct {
	// Back is the queue page with the filter, where "no" leads.
	Back   string
	Queue  string
	Action string
	Scope  string
	IDs    []string
	Filter taskFilter
	Count  int64
}

// queueTasksAction retries or cancels the selected tasks of a queue, after
// a confirmation page that states how many.
func (h *Handler) queueTasksAction(w http.ResponseWriter, r *http.Request) {
	queue := r.PathValue("queue")
	action := r.PostFormValue("action")
	if action != "retry" && action != "cancel" {
		h.fail(w, r, &pageError{status: http.StatusBadRequest, msg: "Choose retry or cancel."})
		return
	}
	scope := r.PostFormValue("scope")
	if scope == "" {
		scope = "selected"
	}
	d := confirmData{Queue: queue, Action: action, Scope: scope, Filter: taskFilterOf(r)}
	d.Back = "/ui/queues/" + escapePath(queue)
	if v := d.Filter.values(); len(v) > 0 {
		d.Back += "?" + v.Encode()
	}
	switch scope {
	case "selected":
		ids := r.PostForm["id"]
		if len(ids) == 0 {
			h.fail(w, r, &pageError{status: http.StatusBadRequest, msg: "Select at least one task."})
			return
		}
		if len(ids) > pageSize*2 {
			h.fail(w, r, &pageError{status: http.StatusBadRequest, msg: "Too many tasks selected."})
			return
		}
		d.IDs, d.Count = ids, int64(len(ids))
		if r.PostFormValue("confirm") != "1" {
			h.render(w, r, http.StatusOK, "confirm", page{Title: "Confirm", Nav: "overview", Data: d})
			return
		}
		var changed int64
		for _, raw := range ids {
			id, err := uuid.Parse(raw)
			if err != nil {
				continue
			}
			if action == "retry" {
				_, err = h.d.Tasks.Retry(r.Context(), id)
			} else {
				_, err = h.d.Tasks.Cancel(r.Context(), id)
			}
			if err == nil {
				changed++
			}
		}
		code := "bulk"
		if changed < d.Count {
			code = "bulkpart"
		}
		redirectDone(w, r, "/ui/queues/"+escapePath(queue), code, changed)
	case "filter":
		h.bulkByFilter(w, r, d)
	default:
		h.fail(w, r, &pageError{status: http.StatusBadRequest, msg: "Choose the selected tasks or every task matching the filter."})
	}
}

// bulkByFilter retries or cancels every task of the queue that matches the
// filter: first a dry run that counts them for the confirmation page, then,
// confirmed, the run, which reports how many it changed.
func (h *Handler) bulkByFilter(w http.ResponseWriter, r *http.Request, d confirmData) {
	if h.d.Bulk == nil {
		h.fail(w, r, &pageError{status: http.StatusBadRequest, msg: "Actions on every task matching a filter are not available on this server."})
		return
	}
	d.Filter.After = ""
	q, err := d.Filter.listQuery(d.Queue)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	cmd := ports.BulkCommand{Filter: q.Filter(), DryRun: r.PostFormValue("confirm") != "1"}
	run := h.d.Bulk.BulkCancel
	if d.Action == "retry" {
		run = h.d.Bulk.BulkRetry
	}
	res, err := run(r.Context(), cmd)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if cmd.DryRun {
		d.Count = res.Matched
		h.render(w, r, http.StatusOK, "confirm", page{Title: "Confirm", Nav: "overview", Data: d})
		return
	}
	var changed, skipped int64
	if res.Changed != nil {
		changed = *res.Changed
	}
	if res.Skipped != nil {
		skipped = *res.Skipped
	}
	code := "bulk"
	if skipped > 0 {
		code = "bulkpart"
	}
	back := d.Filter.values()
	back.Set("ok", code)
	back.Set("n", strconv.FormatInt(changed, 10))
	http.Redirect(w, r, "/ui/queues/"+escapePath(d.Queue)+"?"+back.Encode(), http.StatusSeeOther)
}
