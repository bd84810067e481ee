package application_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/task"
)

// Listing newest first pages on the id, so ids must be time-ordered
// (UUIDv7) and increase with every submission.
func TestSubmitAssignsIncreasingVersion7IDs(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var prev uuid.UUID
	for range 50 {
		created, ok, err := s.tasks.Submit(t.Context(), task.SubmitParams{Queue: "q"})
		require.NoError(t, err)
		require.True(t, ok)
		id := created.ID()
		require.Equal(t, uuid.Version(7), id.Version())
		require.Greater(t, id.String(), prev.String(), "%s after %s", id, prev)
		prev = id
	}
}
