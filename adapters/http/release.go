package http

import (
	"fmt"
	"net/http"

	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

type releaseRequest struct {
	WorkerID string     `json:"worker_id"`
	LeaseID  *uuidValue `json:"lease_id"`
}

func (s *Server) handleReleaseTask(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	var req releaseRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.tasks.Release(r.Context(), ports.ReleaseCommand{TaskID: id, WorkerID: req.WorkerID, LeaseID: req.LeaseID.get()})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, taskJSON(t))
}

type releaseBatchItem struct {
	ID      *uuidValue `json:"id"`
	LeaseID *uuidValue `json:"lease_id"`
}

type releaseBatchRequest struct {
	WorkerID string             `json:"worker_id"`
	Items    []releaseBatchItem `json:"items"`
}

// handleReleaseBatch hands many tasks back: each item's outcome is
// "requeued" (PENDING, claimable now), "dead" (an operator had asked to
// cancel it) or "error" with its problem, like the batch reports'.
func (s *Server) handleReleaseBatch(w http.ResponseWriter, r *http.Request) {
	var req releaseBatchRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	var v validation.Errors
	for i, it := range req.Items {
		if it.ID == nil {
			v.Add(fmt.Sprintf("items[%d].id", i), "is required")
		}
	}
	if err := v.Err(); err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]ports.ReleaseItem, len(req.Items))
	for i, it := range req.Items {
		items[i] = ports.ReleaseItem{TaskID: *it.ID.get(), LeaseID: it.LeaseID.get()}
	}
	results, err := s.tasks.ReleaseBatch(r.Context(), req.WorkerID, items)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, BatchReportResponse{Items: outcomes(r, results)})
}
