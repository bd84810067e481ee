package http

import (
	"net/http"
)

type parentsResponse struct {
	// Parents are the task's parents, with their results, in the order it
	// named them.
	Parents []TaskJSON `json:"parents"`
}

func (s *Server) handleTaskParents(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	ts, err := s.tasks.Parents(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, parentsResponse{Parents: tasksJSON(ts)})
}

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
