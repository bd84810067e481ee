package http

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

type registerRequest struct {
	ID     string   `json:"id"`
	Queues []string `json:"queues"`
	Tags   []string `json:"tags"`
}

func (s *Server) handleRegisterWorker(w http.ResponseWriter, r *http.Request) {
	var req registerRequest
	if err := decode(r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	wk, created, err := s.workers.Register(r.Context(), worker.RegisterParams{ID: req.ID, Queues: req.Queues, Tags: req.Tags})
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, RegisterResponse{
		WorkerJSON:               workerJSON(wk),
		HeartbeatIntervalSeconds: s.workers.Liveness().HeartbeatInterval().Seconds(),
		MaxHeartbeatTasks:        s.workers.MaxHeartbeatTasks(),
	})
}

// heartbeatRequest is an optional body; a nil Tasks (absent, or the body
// absent or {}) means the heartbeat lists nothing.
type heartbeatRequest struct {
	Tasks *[]heldTask `json:"tasks"`
	// ClaimsInFlight are the request ids of claims the worker awaits the
	// answers of (see ports.HeartbeatCommand).
	ClaimsInFlight []string `json:"claims_in_flight"`
}

type heldTask struct {
	ID      *uuidValue `json:"id"`
	LeaseID *uuidValue `json:"lease_id"`
	// Percent, Message and Details, when given (percent is then
	// required), report the task's progress with the renewal.
	Percent *float64        `json:"percent"`
	Message *string         `json:"message"`
	Details json.RawMessage `json:"details"`
}

func (req heartbeatRequest) command(workerID string) (ports.HeartbeatCommand, error) {
	cmd := ports.HeartbeatCommand{WorkerID: workerID, ListsTasks: req.Tasks != nil, ClaimsInFlight: req.ClaimsInFlight}
	if req.Tasks == nil {
		return cmd, nil
	}
	var v validation.Errors
	cmd.Tasks = make([]task.LeaseRef, 0, len(*req.Tasks))
	for i, h := range *req.Tasks {
		if h.ID == nil {
			v.Add(fmt.Sprintf("tasks[%d].id", i), "is required")
		}
		if h.LeaseID == nil {
			v.Add(fmt.Sprintf("tasks[%d].lease_id", i), "is required")
		}
		if h.ID != nil && h.LeaseID != nil {
			cmd.Tasks = append(cmd.Tasks, task.LeaseRef{ID: h.ID.UUID, LeaseID: h.LeaseID.UUID})
			var p *ports.ProgressReport
			if details := nullIsNone(h.Details); h.Percent != nil || h.Message != nil || details != nil {
				p = &ports.ProgressReport{Percent: h.Percent, Details: details}
				if h.Message != nil {
					p.Message = *h.Message
				}
			}
			cmd.Progress = append(cmd.Progress, p)
		}
	}
	return cmd, v.Err()
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	var req heartbeatRequest
	if err := decode(r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	cmd, err := req.command(mux.Vars(r)["id"])
	if err != nil {
		writeError(w, r, err)
		return
	}
	res, err := s.workers.Heartbeat(r.Context(), cmd)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, heartbeatJSON(res))
}

func (s *Server) handleDrainWorker(w http.ResponseWriter, r *http.Request) {
	if err := decode(r, &struct{}{}, true); err != nil {
		writeError(w, r, err)
		return
	}
	wk, err := s.workers.Drain(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, workerJSON(wk))
}

type workersResponse struct {
	Workers []WorkerJSON `json:"workers"`
}

func (s *Server) handleListWorkers(w http.ResponseWriter, r *http.Request) {
	ws, err := s.reads.Workers.List(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]WorkerJSON, len(ws))
	for i, wk := range ws {
		out[i] = workerJSON(wk)
	}
	writeJSON(w, http.StatusOK, workersResponse{Workers: out})
}

type healthResponse struct {
	Status string `json:"status"`
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, healthResponse{Status: "ok"})
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if err := s.health.Ready(r.Context()); err != nil {
		writeProblem(w, r, newProblem(kindUnavailable, "not ready: "+err.Error(), nil))
		return
	}
	writeJSON(w, http.StatusOK, healthResponse{Status: "ready"})
}
