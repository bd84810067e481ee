package http

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// ScheduleJSON is the schedule object of the API.
type ScheduleJSON struct {
	Name     string           `json:"name"`
	Cron     string           `json:"cron"`
	Timezone string           `json:"timezone"`
	Task     ScheduleTaskJSON `json:"task"`
	Overlap  string           `json:"overlap"`
	Paused   bool             `json:"paused"`
	// NextRunAt is the next tick (null while paused).
	NextRunAt *time.Time `json:"next_run_at"`
	// LastTickAt is the last tick that ran or was skipped.
	LastTickAt *time.Time `json:"last_tick_at"`
	// LastTaskID is the task the last tick that ran created.
	LastTaskID *string `json:"last_task_id"`
	// SkippedTicks counts the due ticks that created no task.
	SkippedTicks int64     `json:"skipped_ticks"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// ScheduleTaskJSON is the submission each tick of a schedule makes.
type ScheduleTaskJSON struct {
	Queue       string          `json:"queue"`
	Payload     json.RawMessage `json:"payload"`
	Priority    int             `json:"priority"`
	MaxAttempts int             `json:"max_attempts"`
	Tags        []string        `json:"tags"`
	UniqueKey   *string         `json:"unique_key"`
	Retry       *retryJSON      `json:"retry"`
	// TimeoutSeconds is each tick's task's time limit (null: the queue's
	// default).
	TimeoutSeconds *int `json:"timeout_seconds"`
	// Metadata is each tick's task's metadata ({} when none).
	Metadata map[string]string `json:"metadata"`
}

func scheduleJSON(sc *schedule.Schedule) ScheduleJSON {
	v := sc.Snapshot()
	p := v.Task
	out := ScheduleJSON{
		Name: v.Name, Cron: v.Cron, Timezone: v.Timezone, Overlap: string(v.Overlap), Paused: v.Paused,
		NextRunAt: optTime(v.NextRunAt), LastTickAt: optTime(v.LastTickAt), SkippedTicks: v.SkippedTicks,
		CreatedAt: v.CreatedAt.UTC(), UpdatedAt: v.UpdatedAt.UTC(),
		Task: ScheduleTaskJSON{Queue: p.Queue, Payload: rawOrNull(p.Payload), Priority: p.Priority,
			MaxAttempts: task.DefaultMaxAttempts, Tags: nonNil(p.Tags), UniqueKey: p.UniqueKey,
			TimeoutSeconds: p.TimeoutSeconds, Metadata: p.Metadata},
	}
	if out.Task.Metadata == nil {
		out.Task.Metadata = map[string]string{}
	}
	if p.MaxAttempts != nil {
		out.Task.MaxAttempts = *p.MaxAttempts
	}
	if r := p.Retry; r != nil && r.BaseSeconds != nil {
		out.Task.Retry = &retryJSON{BaseSeconds: r.BaseSeconds, MaxSeconds: r.MaxSeconds}
		if r.Jitter != nil {
			j := string(*r.Jitter)
			out.Task.Retry.Jitter = &j
		}
	}
	if v.LastTaskID != uuid.Nil {
		out.LastTaskID = optString(v.LastTaskID.String())
	}
	return out
}

type createScheduleRequest struct {
	Name     string         `json:"name"`
	Cron     string         `json:"cron"`
	Timezone string         `json:"timezone"`
	Task     *submitRequest `json:"task"`
	Overlap  string         `json:"overlap"`
	Paused   bool           `json:"paused"`
}

func (s *Server) handleCreateSchedule(w http.ResponseWriter, r *http.Request) {
	var req createScheduleRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Task == nil {
		var v validation.Errors
		v.Add("task", "is required: the submit body of each tick's task")
		writeError(w, r, v.Err())
		return
	}
	sc, err := s.schedules.Create(r.Context(), schedule.CreateParams{
		Name: req.Name, Cron: req.Cron, Timezone: req.Timezone, Task: req.Task.params(),
		Overlap: schedule.Overlap(req.Overlap), Paused: req.Paused,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/schedules/v1/"+sc.Name())
	writeJSON(w, http.StatusCreated, scheduleJSON(sc))
}

type schedulesResponse struct {
	Schedules []ScheduleJSON `json:"schedules"`
}

func (s *Server) handleListSchedules(w http.ResponseWriter, r *http.Request) {
	all, err := s.reads.Schedules.List(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]ScheduleJSON, len(all))
	for i, sc := range all {
		out[i] = scheduleJSON(sc)
	}
	writeJSON(w, http.StatusOK, schedulesResponse{Schedules: out})
}

func (s *Server) handleGetSchedule(w http.ResponseWriter, r *http.Request) {
	sc, err := s.schedules.Get(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduleJSON(sc))
}

type patchScheduleRequest struct {
	Name     *string        `json:"name"`
	Cron     *string        `json:"cron"`
	Timezone *string        `json:"timezone"`
	Task     *submitRequest `json:"task"`
	Overlap  *string        `json:"overlap"`
	Paused   *bool          `json:"paused"`
}

func (s *Server) handlePatchSchedule(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	var req patchScheduleRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Name != nil && *req.Name != name {
		var v validation.Errors
		v.Add("name", "cannot be changed: create a schedule with the new name and delete this one")
		writeError(w, r, v.Err())
		return
	}
	p := schedule.PatchParams{Cron: req.Cron, Timezone: req.Timezone, Paused: req.Paused}
	if req.Task != nil {
		tp := req.Task.params()
		p.Task = &tp
	}
	if req.Overlap != nil {
		o := schedule.Overlap(*req.Overlap)
		p.Overlap = &o
	}
	sc, err := s.schedules.Patch(r.Context(), name, p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduleJSON(sc))
}

func (s *Server) handleDeleteSchedule(w http.ResponseWriter, r *http.Request) {
	sc, err := s.schedules.Delete(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduleJSON(sc))
}
