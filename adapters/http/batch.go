package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// batchSubmitItem is a submission in a list (a batch, a complete's
// enqueue, a spawn): it may have a place in a graph of dependencies.
type batchSubmitItem struct {
	submitRequest
	// Ref names the item for later items' depends_on.
	Ref string `json:"ref"`
	// DependsOn lists refs of earlier items and ids of existing tasks.
	DependsOn []dependencyJSON `json:"depends_on"`
}

// dependencyJSON is one depends_on entry: a string (an earlier item's ref,
// else an existing task's id), or {"ref"|"id": ..., "on_failure": ...}.
type dependencyJSON struct{ task.DependsOn }

// UnmarshalJSON implements json.Unmarshaler.
func (d *dependencyJSON) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &d.Name)
	}
	var o struct {
		Ref       *string `json:"ref"`
		ID        *string `json:"id"`
		OnFailure *string `json:"on_failure"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil || (o.Ref == nil) == (o.ID == nil) {
		return errors.New(`a depends_on entry is a string, or an object with one of "ref" or "id" and an optional "on_failure"`)
	}
	if o.Ref != nil {
		d.Name, d.As = *o.Ref, task.NameRef
	} else {
		d.Name, d.As = *o.ID, task.NameID
	}
	if o.OnFailure != nil {
		d.OnFailure = task.OnFailure(*o.OnFailure)
	}
	return nil
}

// graphOf returns the items' submissions, and their refs and depends_on
// when any item has one (nil otherwise: a list without a graph).
func graphOf(items []batchSubmitItem) ([]task.SubmitParams, []task.DependencySpec) {
	if items == nil {
		return nil, nil
	}
	ps := make([]task.SubmitParams, len(items))
	specs := make([]task.DependencySpec, len(items))
	graph := false
	for i, t := range items {
		ps[i] = t.params()
		specs[i].Ref = t.Ref
		for _, d := range t.DependsOn {
			specs[i].DependsOn = append(specs[i].DependsOn, d.DependsOn)
		}
		graph = graph || t.Ref != "" || len(t.DependsOn) > 0
	}
	if !graph {
		specs = nil
	}
	return ps, specs
}

type submitBatchRequest struct {
	// WorkflowID, when given, is the run every item joins.
	WorkflowID *uuidValue        `json:"workflow_id"`
	Tasks      []batchSubmitItem `json:"tasks"`
}

// BatchSubmitResponse lists the batch's tasks in request order; created[i]
// is false where an idempotency key named an existing task.
type BatchSubmitResponse struct {
	Tasks   []TaskJSON `json:"tasks"`
	Created []bool     `json:"created"`
}

func (s *Server) handleSubmitBatch(w http.ResponseWriter, r *http.Request) {
	var req submitBatchRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	ps, specs := graphOf(req.Tasks)
	if run := req.WorkflowID.get(); run != nil {
		for i := range ps {
			ps[i].WorkflowID = *run
		}
	}
	var (
		ts      []*task.Task
		created []bool
		err     error
	)
	end := s.traced(r, ps)
	if specs != nil {
		ts, created, err = s.tasks.SubmitGraph(r.Context(), ps, specs)
	} else {
		ts, created, err = s.tasks.SubmitBatch(r.Context(), ps)
	}
	end(ts, err)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, BatchSubmitResponse{Tasks: tasksJSON(ts), Created: created})
}

type batchItem struct {
	ID        *uuidValue        `json:"id"`
	LeaseID   *uuidValue        `json:"lease_id"`
	Result    json.RawMessage   `json:"result"`
	Error     *string           `json:"error"`
	Retryable *bool             `json:"retryable"`
	Enqueue   []batchSubmitItem `json:"enqueue"`
}

type batchReportRequest struct {
	WorkerID string      `json:"worker_id"`
	Items    []batchItem `json:"items"`
}

// ItemOutcome is one item's result in a batch report: outcome is "done",
// "requeued", "dead", or "error" with the item's problem. A completed item
// that carried enqueue lists the tasks it created (enqueued).
type ItemOutcome struct {
	ID       string      `json:"id"`
	Outcome  string      `json:"outcome"`
	Task     *TaskJSON   `json:"task,omitempty"`
	Problem  *Problem    `json:"problem,omitempty"`
	Enqueued *[]TaskJSON `json:"enqueued,omitempty"`
}

// BatchReportResponse lists the outcomes in request order.
type BatchReportResponse struct {
	Items []ItemOutcome `json:"items"`
}

// decodeBatchReport checks the items' shape: every item needs an id, and
// complete items carry no error while fail items carry no result.
func decodeBatchReport(r *http.Request, failing bool) (batchReportRequest, error) {
	var req batchReportRequest
	if err := decode(r, &req, false); err != nil {
		return req, err
	}
	var v validation.Errors
	checkReportItems(&v, "items", req.Items, failing)
	return req, v.Err()
}

// checkReportItems checks the shape of report items (named list[i]):
// every item needs an id, and complete items carry no error while fail
// items carry no result.
func checkReportItems(v *validation.Errors, list string, items []batchItem, failing bool) {
	for i, it := range items {
		if it.ID == nil {
			v.Add(fmt.Sprintf("%s[%d].id", list, i), "is required")
		}
		if failing && it.Result != nil {
			v.Add(fmt.Sprintf("%s[%d].result", list, i), "is not accepted when failing")
		}
		if !failing && (it.Error != nil || it.Retryable != nil) {
			v.Add(fmt.Sprintf("%s[%d].error", list, i), "is not accepted when completing")
		}
		if failing && it.Enqueue != nil {
			v.Add(fmt.Sprintf("%s[%d].enqueue", list, i), "is not accepted when failing")
		}
	}
}

// completeItems are the complete items' commands (nil for none), with
// their enqueue; each item's id was checked (checkReportItems).
func completeItems(items []batchItem) []ports.CompleteItem {
	if len(items) == 0 {
		return nil
	}
	out := make([]ports.CompleteItem, len(items))
	for i, it := range items {
		out[i] = ports.CompleteItem{TaskID: *it.ID.get(), LeaseID: it.LeaseID.get(), Result: it.Result}
		out[i].Enqueue, out[i].EnqueueGraph = graphOf(it.Enqueue)
	}
	return out
}

// failItems are the fail items' commands (nil for none), retryable unless
// an item says otherwise.
func failItems(items []batchItem) []ports.FailItem {
	if len(items) == 0 {
		return nil
	}
	out := make([]ports.FailItem, len(items))
	for i, it := range items {
		out[i] = ports.FailItem{TaskID: *it.ID.get(), LeaseID: it.LeaseID.get(), Retryable: true}
		if it.Error != nil {
			out[i].Error = *it.Error
		}
		if it.Retryable != nil {
			out[i].Retryable = *it.Retryable
		}
	}
	return out
}

func (s *Server) handleCompleteBatch(w http.ResponseWriter, r *http.Request) {
	req, err := decodeBatchReport(r, false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := completeItems(req.Items)
	// Each item's enqueued tasks keep the traces of their submit spans.
	ends := map[int]func([]*task.Task, error){}
	for i, it := range items {
		if it.Enqueue != nil {
			ends[i] = s.traced(r, it.Enqueue)
		}
	}
	results, err := s.tasks.CompleteBatch(r.Context(), req.WorkerID, items)
	for i, end := range ends {
		if err != nil {
			end(nil, err)
		} else {
			end(results[i].Enqueued, results[i].Err)
		}
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.reportSpans(r, "taskmaster.complete", results)
	writeJSON(w, http.StatusOK, BatchReportResponse{Items: outcomes(r, results)})
}

func (s *Server) handleFailBatch(w http.ResponseWriter, r *http.Request) {
	req, err := decodeBatchReport(r, true)
	if err != nil {
		writeError(w, r, err)
		return
	}
	results, err := s.tasks.FailBatch(r.Context(), req.WorkerID, failItems(req.Items))
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.reportSpans(r, "taskmaster.fail", results)
	writeJSON(w, http.StatusOK, BatchReportResponse{Items: outcomes(r, results)})
}

// reportSpans records the spans of a batch report's items (see taskSpans).
func (s *Server) reportSpans(r *http.Request, name string, results []ports.TaskResult) {
	if s.tracer == nil {
		return
	}
	ts := make([]*task.Task, len(results))
	errs := make([]error, len(results))
	for i, res := range results {
		ts[i], errs[i] = res.Task, res.Err
	}
	s.taskSpans(r, name, requestStart(r.Context()), ts, errs)
}

func outcomes(r *http.Request, results []ports.TaskResult) []ItemOutcome {
	out := make([]ItemOutcome, len(results))
	for i, res := range results {
		out[i] = ItemOutcome{ID: res.ID.String()}
		if res.Task != nil {
			tj := taskJSON(res.Task)
			out[i].Task = &tj
		}
		if res.Enqueued != nil {
			enqueued := tasksJSON(res.Enqueued)
			out[i].Enqueued = &enqueued
		}
		if res.Err != nil {
			p := problemFor(res.Err)
			p.Instance = r.URL.Path
			p.CorrelationID = correlationID(r.Context())
			out[i].Outcome, out[i].Problem = "error", &p
			continue
		}
		switch res.Task.Status() {
		case task.StatusDone:
			out[i].Outcome = "done"
		case task.StatusPending:
			out[i].Outcome = "requeued"
		default:
			out[i].Outcome = "dead"
		}
	}
	return out
}
