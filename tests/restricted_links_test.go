package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
)

// A producer limited to some queues that names, in a batch's depends_on, a
// task of a queue it may not see is refused (422, the id names no task)
// without locking that task: here another transaction holds the task's row
// lock throughout, and the refusal comes back without waiting for it.
// Before, the batch locked every named parent first and checked their
// queues after, so a restricted key could make another queue's writers
// wait on its transaction.
func TestARestrictedProducersDependsOnNeverLocksTasksItMayNotSee(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	producer, _ := s.key(t, jsonObj{"scopes": []string{"produce"}, "queues": []string{"a-*"}})
	hidden := s.admin.Submit(jsonObj{"queue": "b-secret"})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holder, err := s.DB.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE`, hidden.ID)
	require.NoError(t, err)

	answered := make(chan *testclient.Response, 1)
	go func() {
		r, err := producer.Send(http.MethodPost, "/tasks/v1/batch",
			jsonObj{"tasks": []jsonObj{{"queue": "a-q", "depends_on": []string{hidden.ID}}}}, nil)
		if err == nil {
			answered <- r
		}
	}()
	var r *testclient.Response
	testclient.Poll(t, 30*time.Second, "the batch's answer, or its wait for the hidden task's lock", func() bool {
		select {
		case r = <-answered:
			return true
		default:
		}
		var waiting int
		require.NoError(t, s.DB.Get(&waiting, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`))
		require.Zero(t, waiting, "the restricted producer's batch waits for the lock of a task it may not see")
		return false
	})
	p := r.Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"tasks[0].depends_on[0]"}, p.Fields())
	require.NoError(t, holder.Rollback())
	require.Zero(t, countTasks(t, s.Server, "a-q"), "nothing was created")
}

// What GET /tasks/v1/{id}/parents shows a key limited to some queues: the
// parents of a task it may see, in every queue, with their results. The
// link is the grant: only a principal that may see both queues can make it
// (a restricted producer naming another queue's task is refused, above),
// and a pipeline across queues needs its workers to read their input. The
// key still cannot read such a parent any other way (404, like a missing
// task), list its queue (403), nor see its lease.
func TestParentsInAnotherQueueAreShownOnlyThroughTheLink(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	reader, _ := s.key(t, jsonObj{"scopes": []string{"read"}, "queues": []string{"a-*"}})
	producer, _ := s.key(t, jsonObj{"scopes": []string{"produce"}, "queues": []string{"a-*"}})

	parent := submitAndClaim(t, s.admin, "w", jsonObj{"queue": "b-fetch", "payload": "url"})
	s.admin.Complete(parent.ID, holderBody(parent, jsonObj{"result": "page"}))
	running := submitAndClaim(t, s.admin, "w", jsonObj{"queue": "b-fetch", "payload": "other"})
	ts, _ := submitGraph(t, s.admin, jsonObj{"queue": "a-parse", "depends_on": []string{parent.ID, running.ID}})
	child := ts[0]

	var got struct {
		Parents []testclient.Task `json:"parents"`
	}
	reader.Do(http.MethodGet, "/tasks/v1/"+child.ID+"/parents", nil).Expect(t, http.StatusOK, &got)
	require.Len(t, got.Parents, 2)
	require.Equal(t, parent.ID, got.Parents[0].ID)
	require.JSONEq(t, `"page"`, string(got.Parents[0].Result))
	require.Equal(t, "RUNNING", got.Parents[1].Status)
	require.Nil(t, got.Parents[1].LeaseID, "the lease is the holder's")

	reader.Do(http.MethodGet, "/tasks/v1/"+parent.ID, nil).Problem(t, http.StatusNotFound, "task-not-found")
	reader.Do(http.MethodGet, "/tasks/v1/"+parent.ID+"/attempts", nil).Problem(t, http.StatusNotFound, "task-not-found")
	reader.Do(http.MethodGet, "/tasks/v1/"+parent.ID+"/parents", nil).Problem(t, http.StatusNotFound, "task-not-found")
	forbiddenProblem(t, reader.Do(http.MethodGet, "/tasks/v1?queue=b-fetch", nil))
	p := producer.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": "a-q", "depends_on": []string{parent.ID}}}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"tasks[0].depends_on[0]"}, p.Fields(), "a restricted key cannot make the link itself")
}
