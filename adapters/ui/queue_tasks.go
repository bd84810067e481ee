package ui

import (
	"net/http"
	"net/url"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// queueExtra is what the queue page shows beyond the statistics.
type queueExtra struct {
	// BulkByFilter: actions on every task matching a filter exist.
	BulkByFilter bool
}

func (h *Handler) extraRoutes(*http.ServeMux) {}

// queueTasks fills the queue page's task listing: a page of the queue's
// tasks, newest first, continuing after the cursor.
func (h *Handler) queueTasks(r *http.Request, queue string, data *queueData) error {
	f := data.Filter
	limit := pageSize
	q := ports.ListQuery{Queue: queue, Status: task.Status(f.Status), Limit: &limit}
	if f.After != "" {
		id, err := uuid.Parse(f.After)
		if err != nil {
			return &pageError{status: http.StatusBadRequest, msg: "The page cursor is not a task id."}
		}
		q.After = &id
	}
	p, err := h.d.Tasks.List(r.Context(), q)
	if err != nil {
		return err
	}
	data.Tasks = p.Tasks
	v := url.Values{}
	if f.Status != "" {
		v.Set("status", f.Status)
	}
	if p.Next != nil {
		v.Set("after", p.Next.String())
		data.Next = "?" + v.Encode()
	}
	return nil
}

// confirmData is the confirmation of an action on many tasks.
type confirmData struct {
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
	default:
		h.fail(w, r, &pageError{status: http.StatusBadRequest, msg: "Actions on every task matching a filter are not available on this server."})
	}
}
