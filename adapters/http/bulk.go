package http

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// bulkRequest is the body of POST /tasks/v1/bulk/retry and /cancel: a task
// filter and dry_run. Text fields given must not be empty (an empty queue
// would otherwise silently mean every queue).
type bulkRequest struct {
	Queue         *string    `json:"queue"`
	Status        *string    `json:"status"`
	DeadReason    *string    `json:"dead_reason"`
	GroupKey      *string    `json:"group_key"`
	CreatedAfter  *timeValue `json:"created_after"`
	CreatedBefore *timeValue `json:"created_before"`
	ErrorContains *string    `json:"error_contains"`
	Text          *string    `json:"text"`
	// Metadata are pairs the tasks' metadata must all hold.
	Metadata map[string]string `json:"metadata"`
	// WorkflowID is the tasks' run.
	WorkflowID *uuidValue `json:"workflow_id"`
	DryRun     bool       `json:"dry_run"`
}

func (q bulkRequest) filter() (task.Filter, error) {
	var v validation.Errors
	text := func(field string, s *string) string {
		if s == nil {
			return ""
		}
		if *s == "" {
			v.Add(field, "must not be empty (leave the field out to match every task)")
		}
		return *s
	}
	f := task.Filter{
		Queue:         text("queue", q.Queue),
		Statuses:      task.ParseStatuses(text("status", q.Status)),
		DeadReason:    task.DeadReason(text("dead_reason", q.DeadReason)),
		GroupKey:      text("group_key", q.GroupKey),
		CreatedAfter:  q.CreatedAfter.get(),
		CreatedBefore: q.CreatedBefore.get(),
		ErrorContains: text("error_contains", q.ErrorContains),
		Text:          text("text", q.Text),
		Metadata:      q.Metadata,
	}
	if id := q.WorkflowID.get(); id != nil {
		f.WorkflowID = *id
	}
	return f, v.Err()
}

// BulkResultJSON is the answer of a bulk action or purge.
type BulkResultJSON struct {
	// Matched is how many tasks matched when the action began.
	Matched int64 `json:"matched"`
	// DryRun is true when nothing was changed.
	DryRun bool `json:"dry_run"`
	// Changed (retry, cancel) or Removed (purge) is how many tasks the
	// action changed or removed; absent on a dry run.
	Changed *int64 `json:"changed,omitempty"`
	Removed *int64 `json:"removed,omitempty"`
	// Skipped is how many matched but were not changed; absent on a dry
	// run.
	Skipped *int64 `json:"skipped,omitempty"`
}

func (s *Server) handleBulkRetry(w http.ResponseWriter, r *http.Request) {
	s.handleBulk(w, r, s.bulk.BulkRetry)
}

func (s *Server) handleBulkCancel(w http.ResponseWriter, r *http.Request) {
	s.handleBulk(w, r, s.bulk.BulkCancel)
}

func (s *Server) handleBulkReplay(w http.ResponseWriter, r *http.Request) {
	s.handleBulk(w, r, s.bulk.BulkReplay)
}

func (s *Server) handleBulk(w http.ResponseWriter, r *http.Request, do func(context.Context, ports.BulkCommand) (ports.BulkResult, error)) {
	var req bulkRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	f, err := req.filter()
	if err != nil {
		writeError(w, r, err)
		return
	}
	res, err := do(r.Context(), ports.BulkCommand{Filter: f, DryRun: req.DryRun})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, BulkResultJSON{Matched: res.Matched, DryRun: req.DryRun, Changed: res.Changed, Skipped: res.Skipped})
}

type purgeRequest struct {
	Status *string `json:"status"`
	DryRun bool    `json:"dry_run"`
}

// PurgeJobJSON is the progress resource of a large purge.
type PurgeJobJSON struct {
	ID         string     `json:"id"`
	Queue      string     `json:"queue"`
	Status     string     `json:"status"`
	State      string     `json:"state"`
	Matched    int64      `json:"matched"`
	Removed    int64      `json:"removed"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	Error      *string    `json:"error,omitempty"`
}

func purgeJobJSON(j *task.PurgeJob) PurgeJobJSON {
	out := PurgeJobJSON{
		ID: j.ID.String(), Queue: j.Queue, Status: string(j.Status), State: string(j.State), Matched: j.Matched,
		Removed: j.Removed, StartedAt: j.StartedAt.UTC(), FinishedAt: optTime(j.FinishedAt),
	}
	if j.Error != "" {
		out.Error = &j.Error
	}
	return out
}

// purgeLocation is the path of a purge job's progress resource.
func purgeLocation(j *task.PurgeJob) string {
	return "/queues/v1/" + url.PathEscape(j.Queue) + "/purges/" + j.ID.String()
}

func (s *Server) handlePurgeQueue(w http.ResponseWriter, r *http.Request) {
	var req purgeRequest
	if err := decode(r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	cmd := ports.PurgeCommand{Queue: mux.Vars(r)["queue"], DryRun: req.DryRun}
	if req.Status != nil {
		if *req.Status == "" {
			writeError(w, r, &validation.Error{Fields: []validation.FieldError{{Field: "status", Message: "must be PENDING or DEAD"}}})
			return
		}
		cmd.Status = task.Status(*req.Status)
	}
	res, err := s.bulk.Purge(r.Context(), cmd)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if res.Job != nil {
		w.Header().Set("Location", purgeLocation(res.Job))
		writeJSON(w, http.StatusAccepted, purgeJobJSON(res.Job))
		return
	}
	writeJSON(w, http.StatusOK, BulkResultJSON{Matched: res.Matched, DryRun: req.DryRun, Removed: res.Changed, Skipped: res.Skipped})
}

func (s *Server) handlePurgeProgress(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	id, err := uuid.Parse(vars["id"])
	if err != nil {
		writeError(w, r, ports.ErrPurgeJobNotFound)
		return
	}
	j, err := s.bulk.PurgeJob(r.Context(), vars["queue"], id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, purgeJobJSON(j))
}

// listFilterOf reads the listing's filter parameters beyond queue and
// status into q: dead_reason, group_key, created_after and created_before
// (RFC 3339), error_contains, text, workflow_id. Empty parameters are
// absent ones.
func listFilterOf(values url.Values, q *ports.ListQuery, v *validation.Errors) {
	q.DeadReason = task.DeadReason(values.Get("dead_reason"))
	q.GroupKey = values.Get("group_key")
	q.ErrorContains = values.Get("error_contains")
	q.Text = values.Get("text")
	if raw := values.Get("workflow_id"); raw != "" {
		id, err := uuid.Parse(raw)
		if err != nil {
			v.Add("workflow_id", "must be a UUID")
		}
		q.WorkflowID = id
	}
	for name, vals := range values {
		key, ok := strings.CutPrefix(name, task.MetadataFilterPrefix)
		if !ok {
			continue
		}
		if len(vals) > 1 {
			v.Add(name, "must be given once (filters on different keys combine: AND)")
		}
		if q.Metadata == nil {
			q.Metadata = map[string]string{}
		}
		q.Metadata[key] = vals[0]
	}
	for _, p := range []struct {
		name string
		dst  **time.Time
	}{{"created_after", &q.CreatedAfter}, {"created_before", &q.CreatedBefore}} {
		raw := values.Get(p.name)
		if raw == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			v.Add(p.name, "must be an RFC 3339 time, such as 2026-01-02T15:04:05Z")
			continue
		}
		*p.dst = &t
	}
}
