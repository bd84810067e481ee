package http

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

type parentsResponse struct {
	// Parents are a page of the task's parents, with their results, in
	// the order it named them.
	Parents []TaskJSON `json:"parents"`
	// NextCursor continues the parents after this page (null: the last).
	NextCursor *string `json:"next_cursor"`
	// Truncated is true when the page stopped before its limit at the
	// response byte cap.
	Truncated bool `json:"truncated"`
}

func (s *Server) handleTaskParents(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	q, err := parentsQueryOf(r.URL.Query())
	if err != nil {
		writeError(w, r, err)
		return
	}
	page, err := s.tasks.Parents(r.Context(), id, q)
	if err != nil {
		writeError(w, r, err)
		return
	}
	resp := parentsResponse{Parents: tasksJSON(page.Parents), Truncated: page.Truncated}
	if page.Next != nil {
		c := encodePosition(*page.Next)
		resp.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, resp)
}

// parentsQueryOf reads limit and cursor.
func parentsQueryOf(values url.Values) (ports.ParentsQuery, error) {
	var (
		q ports.ParentsQuery
		v validation.Errors
	)
	q.Limit = pageLimitOf(values, &v)
	q.After = pageCursorOf(values, &v, decodePosition)
	return q, v.Err()
}

// encodePosition is the cursor of a position in a list.
func encodePosition(n int64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodePosition(s string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 8 {
		return -1, errBadCursor
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// errBadCursor is a cursor this API did not return.
var errBadCursor = badRequest("not a cursor this API returned")

type attemptsResponse struct {
	// Attempts are the task's attempts, oldest first, the running one last.
	Attempts []AttemptJSON `json:"attempts"`
}

func (s *Server) handleTaskAttempts(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	as, err := s.tasks.Attempts(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, attemptsResponse{Attempts: attemptsJSON(as)})
}

type spawnRequest struct {
	WorkerID string            `json:"worker_id"`
	LeaseID  *uuidValue        `json:"lease_id"`
	Tasks    []batchSubmitItem `json:"tasks"`
}

// SpawnResponse lists the spawned tasks in request order; created[i] is
// false where an idempotency or unique key named an existing task.
type SpawnResponse = BatchSubmitResponse

func (s *Server) handleSpawn(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	var req spawnRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	cmd := ports.SpawnCommand{TaskID: id, WorkerID: req.WorkerID, LeaseID: req.LeaseID.get()}
	cmd.Tasks, cmd.Graph = graphOf(req.Tasks)
	end := s.traced(r, cmd.Tasks)
	ts, created, err := s.tasks.Spawn(r.Context(), cmd)
	end(ts, err)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, SpawnResponse{Tasks: tasksJSON(ts), Created: created})
}

// replayRequest are a replay's overrides (absent: the original's).
type replayRequest struct {
	Payload        json.RawMessage   `json:"payload"`
	Priority       *int              `json:"priority"`
	MaxAttempts    *int              `json:"max_attempts"`
	Tags           []string          `json:"tags"`
	RunAt          *timeValue        `json:"run_at"`
	Deadline       *timeValue        `json:"deadline"`
	GroupKey       *string           `json:"group_key"`
	TimeoutSeconds *int              `json:"timeout_seconds"`
	Metadata       map[string]string `json:"metadata"`
	Traceparent    string            `json:"traceparent"`
	Tracestate     string            `json:"tracestate"`
}

func (s *Server) handleReplay(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	var req replayRequest
	if err := decode(r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	p := task.ReplayParams{
		Payload: nullIsNone(req.Payload), Priority: req.Priority, MaxAttempts: req.MaxAttempts, Tags: req.Tags,
		RunAt: req.RunAt.get(), Deadline: req.Deadline.get(), GroupKey: req.GroupKey, TimeoutSeconds: req.TimeoutSeconds,
		Metadata: req.Metadata, Trace: task.Trace{Parent: req.Traceparent, State: req.Tracestate},
	}
	if p.Trace == (task.Trace{}) {
		// The request's trace (its header, or its span with tracing on);
		// with none either, the replay keeps the original's.
		p.Trace = s.requestTrace(r)
	}
	t, err := s.tasks.Replay(r.Context(), ports.ReplayCommand{TaskID: id, Params: p})
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/tasks/v1/"+t.ID().String())
	writeJSON(w, http.StatusCreated, taskJSON(t))
}
