package http

import (
	"context"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// WorkflowJSON is a run: its tasks counted by status, its times, and a page
// of its tasks, oldest first.
type WorkflowJSON struct {
	ID string `json:"id"`
	// Total counts the run's tasks; StatusCounts them by status (every
	// status, 0 included); DeadReasons the DEAD ones by reason.
	Total        int64            `json:"total"`
	StatusCounts map[string]int64 `json:"status_counts"`
	DeadReasons  map[string]int64 `json:"dead_reasons"`
	// Finished is true when no task of the run is PENDING, RUNNING or
	// BLOCKED.
	Finished       bool       `json:"finished"`
	FirstCreatedAt time.Time  `json:"first_created_at"`
	LastUpdatedAt  time.Time  `json:"last_updated_at"`
	LastFinishedAt *time.Time `json:"last_finished_at"`
	Tasks          []TaskJSON `json:"tasks"`
	NextCursor     *string    `json:"next_cursor"`
	Truncated      bool       `json:"truncated"`
}

func workflowJSON(p ports.WorkflowPage) WorkflowJSON {
	out := WorkflowJSON{
		ID: p.ID.String(), Total: p.Total, StatusCounts: map[string]int64{}, DeadReasons: map[string]int64{},
		Finished: p.Finished, FirstCreatedAt: p.FirstCreatedAt.UTC(), LastUpdatedAt: p.LastUpdatedAt.UTC(),
		LastFinishedAt: optTime(p.LastFinishedAt), Tasks: tasksJSON(p.Tasks), Truncated: p.Truncated,
	}
	for st, n := range p.Counts {
		out.StatusCounts[string(st)] = n
	}
	for r, n := range p.DeadReasons {
		out.DeadReasons[string(r)] = n
	}
	if p.Next != nil {
		c := encodeCursor(*p.Next)
		out.NextCursor = &c
	}
	return out
}

// WorkflowResultJSON is what a run's cancel or retry did.
type WorkflowResultJSON struct {
	ID      string `json:"id"`
	Matched int64  `json:"matched"`
	Changed int64  `json:"changed"`
	// Blocked (a retry) is how many of the changed tasks wait again for
	// their parents.
	Blocked *int64 `json:"blocked,omitempty"`
	Skipped int64  `json:"skipped"`
}

// workflowID parses the {id} path variable; a malformed id names no run.
func workflowID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(mux.Vars(r)["id"])
	if err != nil {
		writeError(w, r, task.ErrWorkflowNotFound)
		return uuid.Nil, false
	}
	return id, true
}

func (s *Server) handleGetWorkflow(w http.ResponseWriter, r *http.Request) {
	id, ok := workflowID(w, r)
	if !ok {
		return
	}
	q := ports.WorkflowQuery{ID: id}
	var v validation.Errors
	q.Limit = pageLimitOf(r.URL.Query(), &v)
	q.After = pageCursorOf(r.URL.Query(), &v, decodeCursor)
	if err := v.Err(); err != nil {
		writeError(w, r, err)
		return
	}
	page, err := s.workflows.Workflow(r.Context(), q)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, workflowJSON(page))
}

func (s *Server) handleCancelWorkflow(w http.ResponseWriter, r *http.Request) {
	s.handleWorkflowAction(w, r, s.workflows.Cancel, false)
}

func (s *Server) handleRetryWorkflow(w http.ResponseWriter, r *http.Request) {
	s.handleWorkflowAction(w, r, s.workflows.Retry, true)
}

// handleWorkflowAction serves a run's cancel or retry (retry: the answer
// says how many tasks wait again for their parents).
func (s *Server) handleWorkflowAction(w http.ResponseWriter, r *http.Request, do func(context.Context, uuid.UUID) (ports.WorkflowResult, error), retry bool) {
	id, ok := workflowID(w, r)
	if !ok {
		return
	}
	if err := decode(r, &struct{}{}, true); err != nil {
		writeError(w, r, err)
		return
	}
	res, err := do(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := WorkflowResultJSON{ID: res.ID.String(), Matched: res.Matched, Changed: res.Changed, Skipped: res.Skipped}
	if retry {
		out.Blocked = &res.Blocked
	}
	writeJSON(w, http.StatusOK, out)
}
