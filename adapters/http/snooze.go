package http

import (
	"net/http"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// retryJSON is a task's own retry policy, in requests and responses.
type retryJSON struct {
	BaseSeconds *float64 `json:"base_seconds"`
	MaxSeconds  *float64 `json:"max_seconds"`
	Jitter      *string  `json:"jitter"`
}

// params returns the policy as submitted (nil for none).
func (r *retryJSON) params() *task.RetryParams {
	if r == nil {
		return nil
	}
	p := &task.RetryParams{BaseSeconds: r.BaseSeconds, MaxSeconds: r.MaxSeconds}
	if r.Jitter != nil {
		j := backoff.Jitter(*r.Jitter)
		p.Jitter = &j
	}
	return p
}

// retryJSONOf shows a stored policy (nil: none).
func retryJSONOf(p *backoff.Policy) *retryJSON {
	if p == nil {
		return nil
	}
	base, most, jitter := p.Base.Seconds(), p.Cap.Seconds(), string(p.Jitter)
	if jitter == "" {
		jitter = string(backoff.JitterNone)
	}
	return &retryJSON{BaseSeconds: &base, MaxSeconds: &most, Jitter: &jitter}
}

type snoozeRequest struct {
	WorkerID     string     `json:"worker_id"`
	LeaseID      *uuidValue `json:"lease_id"`
	DelaySeconds *int       `json:"delay_seconds"`
}

func (s *Server) handleSnoozeTask(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	var req snoozeRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.tasks.Snooze(r.Context(), ports.SnoozeCommand{
		TaskID: id, WorkerID: req.WorkerID, LeaseID: req.LeaseID.get(), DelaySeconds: req.DelaySeconds,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.taskSpans(r, "taskmaster.snooze", requestStart(r.Context()), []*task.Task{t}, nil)
	writeJSON(w, http.StatusOK, taskJSON(t))
}
