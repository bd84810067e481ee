package http

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

type submitRequest struct {
	Queue          string            `json:"queue"`
	Payload        json.RawMessage   `json:"payload"`
	Priority       int               `json:"priority"`
	MaxAttempts    *int              `json:"max_attempts"`
	Tags           []string          `json:"tags"`
	Deadline       *timeValue        `json:"deadline"`
	RunAt          *timeValue        `json:"run_at"`
	IdempotencyKey string            `json:"idempotency_key"`
	UniqueKey      *string           `json:"unique_key"`
	Retry          *retryJSON        `json:"retry"`
	GroupKey       *string           `json:"group_key"`
	TimeoutSeconds *int              `json:"timeout_seconds"`
	Metadata       map[string]string `json:"metadata"`
	// Traceparent and Tracestate, when given, are the item's own trace
	// context (else the request's headers').
	Traceparent string `json:"traceparent"`
	Tracestate  string `json:"tracestate"`
	// DebounceSeconds and DebounceMaxSeconds debounce the submission on
	// its unique key; ThrottleSeconds throttles it (single submissions
	// only).
	DebounceSeconds    *int `json:"debounce_seconds"`
	DebounceMaxSeconds *int `json:"debounce_max_seconds"`
	ThrottleSeconds    *int `json:"throttle_seconds"`
}

// params are the submission's parameters; the trace is the item's own
// (the handler fills in the request's when it has none: traced). A
// debounce_max_seconds without debounce_seconds is checked as a debounce
// of 0 seconds (refused).
func (q submitRequest) params() task.SubmitParams {
	p := task.SubmitParams{
		Queue: q.Queue, Payload: q.Payload, Priority: q.Priority, MaxAttempts: q.MaxAttempts,
		Tags: q.Tags, Deadline: q.Deadline.get(), RunAt: q.RunAt.get(), IdempotencyKey: q.IdempotencyKey,
		UniqueKey: q.UniqueKey, Retry: q.Retry.params(), GroupKey: q.GroupKey,
		TimeoutSeconds: q.TimeoutSeconds, Metadata: q.Metadata, Trace: task.Trace{Parent: q.Traceparent, State: q.Tracestate},
		ThrottleSeconds: q.ThrottleSeconds,
	}
	if q.DebounceSeconds != nil || q.DebounceMaxSeconds != nil {
		p.Debounce = &task.DebounceParams{MaxSeconds: q.DebounceMaxSeconds}
		if q.DebounceSeconds != nil {
			p.Debounce.Seconds = *q.DebounceSeconds
		}
	}
	return p
}

// traced gives each submission the trace it keeps (its own, else the
// request's; see submitSpan) and returns the function that ends their
// spans with the tasks the submissions made (nil: refused with err).
func (s *Server) traced(r *http.Request, ps []task.SubmitParams) func(ts []*task.Task, err error) {
	if s.tracer == nil {
		// Nothing to end: the request's trace, read once, for the items
		// without their own.
		var req *task.Trace
		for i := range ps {
			if ps[i].Trace == (task.Trace{}) {
				if req == nil {
					tr := s.requestTrace(r)
					req = &tr
				}
				ps[i].Trace = *req
			}
		}
		return endNothing
	}
	ends := make([]func(*task.Task, error), len(ps))
	for i := range ps {
		ps[i].Trace, ends[i] = s.submitSpan(r, ps[i].Queue, ps[i].Trace)
	}
	return func(ts []*task.Task, err error) {
		for i, end := range ends {
			var t *task.Task
			if i < len(ts) {
				t = ts[i]
			}
			end(t, err)
		}
	}
}

func endNothing([]*task.Task, error) {}

// waitOf reads the wait_ms query parameter (nil when absent or empty).
func waitOf(r *http.Request) (*int64, error) {
	raw := r.URL.Query().Get("wait_ms")
	if raw == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		var v validation.Errors
		v.Add("wait_ms", "must be a whole number of milliseconds")
		return nil, v.Err()
	}
	return &n, nil
}

func (s *Server) handleSubmitTask(w http.ResponseWriter, r *http.Request) {
	var req submitRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	wait, err := waitOf(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	ps := []task.SubmitParams{req.params()}
	end := s.traced(r, ps)
	var (
		t       *task.Task
		created bool
	)
	if wait != nil {
		t, created, err = s.tasks.SubmitAndAwait(r.Context(), ps[0], wait)
	} else {
		t, created, err = s.tasks.Submit(r.Context(), ps[0])
	}
	end([]*task.Task{t}, err)
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/tasks/v1/"+t.ID().String())
	}
	writeJSON(w, status, taskJSON(t))
}

func (s *Server) handleGetTask(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	wait, err := waitOf(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var d ports.TaskDetail
	if wait != nil {
		d, err = s.tasks.Await(r.Context(), ports.AwaitCommand{TaskID: id, WaitMillis: wait})
	} else {
		d, err = s.tasks.Describe(r.Context(), id)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, taskDetailJSON(d))
}

type listTasksResponse struct {
	Tasks      []TaskJSON `json:"tasks"`
	NextCursor *string    `json:"next_cursor"`
	// Truncated is true when the page stopped before its limit at the
	// response byte cap (next_cursor continues after its last task).
	Truncated bool `json:"truncated"`
}

func (s *Server) handleListTasks(w http.ResponseWriter, r *http.Request) {
	q, err := listQueryOf(r.URL.Query())
	if err != nil {
		writeError(w, r, err)
		return
	}
	page, err := s.reads.Tasks.List(r.Context(), q)
	if err != nil {
		writeError(w, r, err)
		return
	}
	resp := listTasksResponse{Tasks: tasksJSON(page.Tasks), Truncated: page.Truncated}
	if page.Next != nil {
		c := encodeCursor(*page.Next)
		resp.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, resp)
}

// listQueryOf reads the listing's query parameters. An empty parameter
// (limit=) is the same as an absent one; a limit that is not an integer, or
// a cursor this API did not return, is a 422.
func listQueryOf(values url.Values) (ports.ListQuery, error) {
	q := ports.ListQuery{Queue: values.Get("queue"), Status: task.Status(values.Get("status"))}
	var v validation.Errors
	listFilterOf(values, &q, &v)
	q.Limit = pageLimitOf(values, &v)
	q.After = pageCursorOf(values, &v, decodeCursor)
	return q, v.Err()
}

func encodeCursor(id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString(id[:])
}

func decodeCursor(s string) (uuid.UUID, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return uuid.Nil, err
	}
	return uuid.FromBytes(b)
}

type claimRequest struct {
	WorkerID     string  `json:"worker_id"`
	Queue        string  `json:"queue"`
	Limit        *int    `json:"limit"`
	WaitMS       *int64  `json:"wait_ms"`
	LeaseSeconds *int    `json:"lease_seconds"`
	RequestID    *string `json:"request_id"`
	// Complete and Fail are the worker's reports, applied before the
	// claim in its transaction (items as the batch reports').
	Complete []batchItem `json:"complete"`
	Fail     []batchItem `json:"fail"`
}

type claimResponse struct {
	Tasks []TaskJSON `json:"tasks"`
	// Truncated is true when the claim stopped before its limit at the
	// response byte cap: more tasks may be claimable at once.
	Truncated bool `json:"truncated"`
	// Completed and Failed are the outcomes of the claim's reports, in
	// request order (absent when it carried none).
	Completed []ItemOutcome `json:"completed,omitempty"`
	Failed    []ItemOutcome `json:"failed,omitempty"`
}

func (s *Server) handleClaimTasks(w http.ResponseWriter, r *http.Request) {
	var req claimRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	// The items' shape, as the batch reports check theirs; what the claim
	// does not take (enqueue) the use case refuses.
	var v validation.Errors
	checkReportItems(&v, "complete", req.Complete, false)
	checkReportItems(&v, "fail", req.Fail, true)
	if err := v.Err(); err != nil {
		writeError(w, r, err)
		return
	}
	res, err := s.tasks.Claim(r.Context(), ports.ClaimCommand{
		WorkerID: req.WorkerID, Queue: req.Queue, Limit: req.Limit, WaitMillis: req.WaitMS, LeaseSeconds: req.LeaseSeconds,
		RequestID: req.RequestID, Complete: completeItems(req.Complete), Fail: failItems(req.Fail),
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.reportSpans(r, "taskmaster.complete", res.Completed)
	s.reportSpans(r, "taskmaster.fail", res.Failed)
	s.taskSpans(r, "taskmaster.claim", requestStart(r.Context()), res.Tasks, nil)
	writeJSON(w, http.StatusOK, claimResponse{Tasks: tasksJSON(res.Tasks), Truncated: res.Truncated,
		Completed: outcomes(r, res.Completed), Failed: outcomes(r, res.Failed)})
}

type completeRequest struct {
	WorkerID string          `json:"worker_id"`
	LeaseID  *uuidValue      `json:"lease_id"`
	Result   json.RawMessage `json:"result"`
	// Enqueue, when present (even empty), takes the path that creates the
	// tasks with the completion and answers with them (enqueued).
	Enqueue []batchSubmitItem `json:"enqueue"`
}

// CompleteResponse is the completed task and, when the complete carried
// enqueue, the tasks it created (or found, for repeated idempotency keys).
type CompleteResponse struct {
	TaskJSON
	Enqueued []TaskJSON `json:"enqueued"`
}

func (s *Server) handleCompleteTask(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	var req completeRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	cmd := ports.CompleteCommand{TaskID: id, WorkerID: req.WorkerID, LeaseID: req.LeaseID.get(), Result: req.Result}
	if req.Enqueue != nil {
		cmd.Enqueue, cmd.EnqueueGraph = graphOf(req.Enqueue)
		end := s.traced(r, cmd.Enqueue)
		c, err := s.tasks.CompleteEnqueue(r.Context(), cmd)
		end(c.Enqueued, err)
		if err != nil {
			writeError(w, r, err)
			return
		}
		s.taskSpans(r, "taskmaster.complete", requestStart(r.Context()), []*task.Task{c.Task}, nil)
		writeJSON(w, http.StatusOK, CompleteResponse{TaskJSON: taskJSON(c.Task), Enqueued: tasksJSON(c.Enqueued)})
		return
	}
	t, err := s.tasks.Complete(r.Context(), cmd)
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.taskSpans(r, "taskmaster.complete", requestStart(r.Context()), []*task.Task{t}, nil)
	writeJSON(w, http.StatusOK, taskJSON(t))
}

type failRequest struct {
	WorkerID  string     `json:"worker_id"`
	LeaseID   *uuidValue `json:"lease_id"`
	Error     string     `json:"error"`
	Retryable *bool      `json:"retryable"`
}

func (s *Server) handleFailTask(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	var req failRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	cmd := ports.FailCommand{TaskID: id, WorkerID: req.WorkerID, LeaseID: req.LeaseID.get(), Error: req.Error, Retryable: true}
	if req.Retryable != nil {
		cmd.Retryable = *req.Retryable
	}
	t, err := s.tasks.Fail(r.Context(), cmd)
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.taskSpans(r, "taskmaster.fail", requestStart(r.Context()), []*task.Task{t}, []error{errors.New(cmd.Error)})
	writeJSON(w, http.StatusOK, taskJSON(t))
}

type extendRequest struct {
	WorkerID     string     `json:"worker_id"`
	LeaseID      *uuidValue `json:"lease_id"`
	LeaseSeconds *int       `json:"lease_seconds"`
}

func (s *Server) handleExtendLease(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	var req extendRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.tasks.Extend(r.Context(), ports.ExtendCommand{
		TaskID: id, WorkerID: req.WorkerID, LeaseID: req.LeaseID.get(), LeaseSeconds: req.LeaseSeconds,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.taskSpans(r, "taskmaster.extend", requestStart(r.Context()), []*task.Task{t}, nil)
	writeJSON(w, http.StatusOK, taskJSON(t))
}

type progressRequest struct {
	WorkerID string          `json:"worker_id"`
	LeaseID  *uuidValue      `json:"lease_id"`
	Percent  *float64        `json:"percent"`
	Message  string          `json:"message"`
	Details  json.RawMessage `json:"details"`
}

func (s *Server) handleReportProgress(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	var req progressRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.tasks.ReportProgress(r.Context(), ports.ProgressCommand{
		TaskID: id, WorkerID: req.WorkerID, LeaseID: req.LeaseID.get(),
		ProgressReport: ports.ProgressReport{Percent: req.Percent, Message: req.Message, Details: nullIsNone(req.Details)},
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.taskSpans(r, "taskmaster.progress", requestStart(r.Context()), []*task.Task{t}, nil)
	writeJSON(w, http.StatusOK, taskJSON(t))
}

// nullIsNone reads a JSON null as no value.
func nullIsNone(raw json.RawMessage) json.RawMessage {
	if string(raw) == "null" {
		return nil
	}
	return raw
}

func (s *Server) handleRetryTask(w http.ResponseWriter, r *http.Request) {
	s.handleAdminTransition(w, r, s.tasks.Retry)
}

func (s *Server) handleCancelTask(w http.ResponseWriter, r *http.Request) {
	s.handleAdminTransition(w, r, s.tasks.Cancel)
}

func (s *Server) handleAdminTransition(w http.ResponseWriter, r *http.Request, do func(ctx context.Context, id uuid.UUID) (*task.Task, error)) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	if err := decode(r, &struct{}{}, true); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := do(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, taskJSON(t))
}

// taskID parses the {id} path variable; a malformed id names no task (404).
func taskID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(mux.Vars(r)["id"])
	if err != nil {
		writeError(w, r, task.ErrNotFound)
		return uuid.Nil, false
	}
	return id, true
}
