package application_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// A principal limited to some queues must name one of them in a bulk
// action, a purge or a purge's progress; an unrestricted one may act on
// every queue at once.
func TestBulkActionsKeepToTheKeysQueues(t *testing.T) {
	t.Parallel()
	s := setup(t)
	bulk := application.NewBulkService(s.tx, application.BulkConfig{})
	limited := as(t, s, apikey.CreateParams{Scopes: []apikey.Scope{apikey.ScopeProduce}, Queues: []string{"emails-*"}})

	_, err := bulk.BulkCancel(limited, ports.BulkCommand{DryRun: true})
	require.Equal(t, "*", forbidden(t, err).Queue)
	_, err = bulk.BulkRetry(limited, ports.BulkCommand{Filter: task.Filter{Queue: "sms"}, DryRun: true})
	require.Equal(t, "sms", forbidden(t, err).Queue)
	_, err = bulk.Purge(limited, ports.PurgeCommand{Queue: "sms", DryRun: true})
	forbidden(t, err)
	_, err = bulk.PurgeJob(limited, "sms", [16]byte{})
	forbidden(t, err)

	res, err := bulk.BulkRetry(limited, ports.BulkCommand{Filter: task.Filter{Queue: "emails-eu"}, DryRun: true})
	require.NoError(t, err)
	require.Zero(t, res.Matched)
	_, err = bulk.BulkCancel(t.Context(), ports.BulkCommand{DryRun: true})
	require.NoError(t, err)
}
