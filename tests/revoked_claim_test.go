package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
)

// A claim waiting (wait_ms) under a key that is revoked meanwhile claims
// nothing: woken by a new task, it checks its key before it looks, and
// answers 401 with a Bearer challenge. The task stays PENDING for a worker
// whose key works, instead of sitting RUNNING under a key that can no
// longer report it until its lease runs out.
func TestAWaitingClaimOfARevokedKeyClaimsNothing(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	worker, keyID := s.key(t, jsonObj{"scopes": []string{"work"}})
	worker.Register(jsonObj{"id": "w", "queues": []string{"q"}})

	answered := make(chan *testclient.Response, 1)
	go func() {
		r, err := worker.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "queue": "q", "wait_ms": 30000}, nil)
		if err == nil {
			answered <- r
		}
	}()
	testclient.Poll(t, 30*time.Second, "the claim waits", func() bool {
		body := string(s.admin.Do(http.MethodGet, "/metrics", nil).Body)
		return strings.Contains(body, "\ntaskmaster_claims_waiting 1\n")
	})
	s.admin.Do(http.MethodDelete, "/admin/v1/keys/"+keyID, nil).Expect(t, http.StatusOK, nil)
	created := s.admin.Submit(jsonObj{"queue": "q"})

	var r *testclient.Response
	select {
	case r = <-answered:
	case <-time.After(40 * time.Second):
		t.Fatal("the waiting claim did not answer")
	}
	p := r.Problem(t, http.StatusUnauthorized, "unauthorized")
	require.Contains(t, p.Detail, "revoked")
	require.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), `Bearer realm="taskmaster"`), r.Header)
	got := s.admin.Get(created.ID)
	require.Equal(t, "PENDING", got.Status, "the revoked key's claim took nothing")
	require.Nil(t, got.WorkerID)
}
