package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// startAPI runs the real application on a fresh database and returns it with
// a client. mutate, when not nil, adjusts the configuration.
func startAPI(t *testing.T, mutate func(*app.Config)) (*testserver.Server, *testclient.Client) {
	t.Helper()
	s := testserver.Start(t, mutate)
	return s, testclient.New(t, s.URL)
}

// stage changes the database directly, to reach a state the API cannot
// produce quickly (a DEAD worker, an old heartbeat).
func stage(t *testing.T, s *testserver.Server, query string, args ...any) {
	t.Helper()
	_, err := s.DB.ExecContext(t.Context(), query, args...)
	require.NoError(t, err)
}

// jsonObj is a JSON object literal.
type jsonObj = map[string]any
