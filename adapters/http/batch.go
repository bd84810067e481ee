package http

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// batchSubmitItem is a submission in a batch: it may have a place in a
// graph of dependencies.
type batchSubmitItem struct {
	submitRequest
	// Ref names the item for later items' depends_on.
	Ref string `json:"ref"`
	// DependsOn lists refs of earlier items and ids of existing tasks.
	DependsOn []string `json:"depends_on"`
}

type submitBatchRequest struct {
	Tasks []batchSubmitItem `json:"tasks"`
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
	ps := make([]task.SubmitParams, len(req.Tasks))
	specs := make([]task.DependencySpec, len(req.Tasks))
	graph := false
	for i, t := range req.Tasks {
		ps[i] = t.params()
		specs[i] = task.DependencySpec{Ref: t.Ref, DependsOn: t.DependsOn}
		graph = graph || t.Ref != "" || len(t.DependsOn) > 0
	}
	var (
		ts      []*task.Task
		created []bool
		err     error
	)
	end := s.traced(r, ps)
	if graph {
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
	ID        *uuidValue      `json:"id"`
	LeaseID   *uuidValue      `json:"lease_id"`
	Result    json.RawMessage `json:"result"`
	Error     *string         `json:"error"`
	Retryable *bool           `json:"retryable"`
	Enqueue   []submitRequest `json:"enqueue"`
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
	for i, it := range req.Items {
		if it.ID == nil {
			v.Add(fmt.Sprintf("items[%d].id", i), "is required")
		}
		if failing && it.Result != nil {
			v.Add(fmt.Sprintf("items[%d].result", i), "is not accepted when failing")
		}
		if !failing && (it.Error != nil || it.Retryable != nil) {
			v.Add(fmt.Sprintf("items[%d].error", i), "is not accepted when completing")
		}
		if failing && it.Enqueue != nil {
			v.Add(fmt.Sprintf("items[%d].enqueue", i), "is not accepted when failing")
		}
	}
	return req, v.Err()
}

func (s *Server) handleCompleteBatch(w http.ResponseWriter, r *http.Request) {
	req, err := decodeBatchReport(r, false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]ports.CompleteItem, len(req.Items))
	// Each item's enqueued tasks keep the traces of their submit spans.
	ends := map[int]func([]*task.Task, error){}
	for i, it := range req.Items {
		items[i] = ports.CompleteItem{TaskID: *it.ID.get(), LeaseID: it.LeaseID.get(), Result: it.Result, Enqueue: submitParams(it.Enqueue)}
		if items[i].Enqueue != nil {
			ends[i] = s.traced(r, items[i].Enqueue)
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
	items := make([]ports.FailItem, len(req.Items))
	for i, it := range req.Items {
		items[i] = ports.FailItem{TaskID: *it.ID.get(), LeaseID: it.LeaseID.get(), Retryable: true}
		if it.Error != nil {
			items[i].Error = *it.Error
		}
		if it.Retryable != nil {
			items[i].Retryable = *it.Retryable
		}
	}
	results, err := s.tasks.FailBatch(r.Context(), req.WorkerID, items)
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
