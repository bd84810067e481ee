package reapers_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/worker"
)

// conflict requires a 409 invalid-transition problem naming the task's
// current status.
func (s *instance) conflict(t *testing.T, path, current string) {
	t.Helper()
	var p httpadapter.Problem
	s.expect(t, http.MethodPost, path, nil, http.StatusConflict, &p)
	require.Equal(t, httpadapter.ProblemTypePrefix+"invalid-transition", p.Type)
	require.Equal(t, current, p.CurrentStatus)
	require.NotEmpty(t, p.Detail)
}

func TestRetryAndCancelEndpoints(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), func(cfg *app.Config) {
		cfg.App.Liveness = worker.DefaultLivenessConfig() // the worker must not die mid-test
	})
	queue := "q-" + uuid.NewString()
	s.register(t, "w")

	// cancel: PENDING -> DEAD cancelled; on RUNNING a request (see
	// leases_test.go); 409 from DONE and DEAD.
	tk := s.submit(t, map[string]any{"queue": queue})
	var got httpadapter.TaskJSON
	s.expect(t, http.MethodPost, "/tasks/v1/"+tk.ID+"/cancel", nil, http.StatusOK, &got)
	require.Equal(t, "DEAD", got.Status)
	require.Equal(t, "cancelled", *got.DeadReason)
	require.NotNil(t, got.FinishedAt)
	s.conflict(t, "/tasks/v1/"+tk.ID+"/cancel", "DEAD")

	// retry: DEAD -> PENDING, attempts reset, history kept in last_error.
	s.expect(t, http.MethodPost, "/tasks/v1/"+tk.ID+"/retry", nil, http.StatusOK, &got)
	require.Equal(t, "PENDING", got.Status)
	require.Nil(t, got.DeadReason)
	require.Nil(t, got.FinishedAt)
	require.Contains(t, *got.LastError, "cancelled")
	s.conflict(t, "/tasks/v1/"+tk.ID+"/retry", "PENDING")

	// RUNNING refuses retry; DONE refuses both.
	claimed := s.claim(t, "w", queue, 1)
	require.Len(t, claimed, 1)
	require.Equal(t, tk.ID, claimed[0].ID)
	s.conflict(t, "/tasks/v1/"+tk.ID+"/retry", "RUNNING")
	s.expect(t, http.MethodPost, "/tasks/v1/"+tk.ID+"/complete", map[string]any{"worker_id": "w", "lease_id": *claimed[0].LeaseID}, http.StatusOK, nil)
	s.conflict(t, "/tasks/v1/"+tk.ID+"/cancel", "DONE")
	s.conflict(t, "/tasks/v1/"+tk.ID+"/retry", "DONE")

	// A task that exhausted its attempts gets them all back.
	ex := s.submit(t, map[string]any{"queue": queue, "max_attempts": 1})
	exClaimed := s.claim(t, "w", queue, 1)
	require.Len(t, exClaimed, 1)
	s.expect(t, http.MethodPost, "/tasks/v1/"+ex.ID+"/fail", map[string]any{"worker_id": "w", "lease_id": *exClaimed[0].LeaseID, "error": "disk full"}, http.StatusOK, &got)
	require.Equal(t, "exhausted", *got.DeadReason)
	s.expect(t, http.MethodPost, "/tasks/v1/"+ex.ID+"/retry", nil, http.StatusOK, &got)
	require.Equal(t, "PENDING", got.Status)
	require.Zero(t, got.Attempts)
	require.Contains(t, *got.LastError, "exhausted")
	require.Contains(t, *got.LastError, "disk full")
	again := s.claim(t, "w", queue, 1)
	require.Len(t, again, 1)
	require.Equal(t, 1, again[0].Attempts)

	// Unknown or malformed ids are 404; a body is refused.
	s.expect(t, http.MethodPost, "/tasks/v1/"+uuid.NewString()+"/retry", nil, http.StatusNotFound, nil)
	s.expect(t, http.MethodPost, "/tasks/v1/not-a-uuid/cancel", nil, http.StatusNotFound, nil)
	s.expect(t, http.MethodPost, "/tasks/v1/"+tk.ID+"/cancel", map[string]any{"force": true}, http.StatusBadRequest, nil)

	events := outbox(t, s.DB, event.TaskDeadLettered, event.TaskRetried)
	require.Equal(t, []string{
		"task.dead_lettered PENDING>DEAD cancelled",
		"task.retried DEAD>PENDING retried",
	}, transitions(about(events, tk.ID)))
	require.Equal(t, []string{"task.retried DEAD>PENDING retried"}, transitions(about(events, ex.ID)))
}
