package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/worker"
)

// A worker belongs to the key that registered it; registering it again
// never changes an owner, and gives an ownerless worker (registered with
// authentication off) the registering key.
func TestOwnerIsKeptAcrossRegistrations(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	w, _, err := worker.Register(worker.RegisterParams{ID: "w1", Owner: "key-a"}, now)
	require.NoError(t, err)
	require.Equal(t, "key-a", w.Owner())

	_, err = w.Reregister(worker.RegisterParams{Owner: "key-b"}, now)
	require.NoError(t, err)
	require.Equal(t, "key-a", w.Owner(), "an admin re-registering the worker does not take it over")
	_, err = w.Reregister(worker.RegisterParams{}, now)
	require.NoError(t, err)
	require.Equal(t, "key-a", w.Owner(), "nor does a registration with authentication off")

	open, _, err := worker.Register(worker.RegisterParams{ID: "w2"}, now)
	require.NoError(t, err)
	require.Empty(t, open.Owner())
	_, err = open.Reregister(worker.RegisterParams{Owner: "key-b"}, now)
	require.NoError(t, err)
	require.Equal(t, "key-b", open.Owner(), "the first key to register an ownerless worker owns it")
	require.Equal(t, "key-b", worker.Restore(open.Snapshot()).Owner())
}
