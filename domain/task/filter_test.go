package task_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

func filterFields(t *testing.T, err error) []string {
	t.Helper()
	var v *validation.Error
	require.True(t, errors.As(err, &v), "%v", err)
	var out []string
	for _, f := range v.Fields {
		out = append(out, f.Field)
	}
	return out
}

func TestForBulkSettlesStatusesAndRefusesWhatTheActionCannotChange(t *testing.T) {
	t.Parallel()
	f, err := task.Filter{}.ForBulk(task.BulkRetry)
	require.NoError(t, err)
	require.Equal(t, []task.Status{task.StatusDead}, f.Statuses)
	require.False(t, f.WithoutCancelRequest)
	f, err = task.Filter{Queue: "q"}.ForBulk(task.BulkCancel)
	require.NoError(t, err)
	require.Equal(t, []task.Status{task.StatusPending, task.StatusBlocked, task.StatusRunning}, f.Statuses)
	require.True(t, f.WithoutCancelRequest)

	for _, tc := range []struct {
		a     task.BulkAction
		f     task.Filter
		field string
	}{
		{task.BulkRetry, task.Filter{Statuses: []task.Status{task.StatusPending}}, "status"},
		{task.BulkCancel, task.Filter{Statuses: []task.Status{task.StatusDone}}, "status"},
		{task.BulkCancel, task.Filter{Statuses: []task.Status{"LOST"}}, "status"},
		{task.BulkCancel, task.Filter{DeadReason: task.DeadExhausted}, "dead_reason"},
		{task.BulkRetry, task.Filter{DeadReason: "bored"}, "dead_reason"},
		{task.BulkRetry, task.Filter{Queue: "a b"}, "queue"},
		{task.BulkRetry, task.Filter{GroupKey: strings.Repeat("é", 129)}, "group_key"},
		{task.BulkRetry, task.Filter{ErrorContains: strings.Repeat("x", 201)}, "error_contains"},
		{task.BulkRetry, task.Filter{Text: "a\x00"}, "text"},
		{task.BulkRetry, task.Filter{CreatedAfter: ptr(time.Unix(2, 0)), CreatedBefore: ptr(time.Unix(1, 0))}, "created_after"},
		{task.BulkRetry, task.Filter{Metadata: map[string]string{"a b": "x"}}, "metadata.a b"},
		{task.BulkCancel, task.Filter{Metadata: map[string]string{"tenant": "a\nb"}}, "metadata.tenant"},
	} {
		_, err := tc.f.ForBulk(tc.a)
		require.Equal(t, []string{tc.field}, filterFields(t, err), "%s %+v", tc.a, tc.f)
	}
	_, err = task.Filter{GroupKey: strings.Repeat("é", 128), ErrorContains: strings.Repeat("é", 200)}.ForBulk(task.BulkRetry)
	require.NoError(t, err, "lengths count characters, not bytes")
}

func TestPurgeRemovesOnlyPendingAndDeadTasks(t *testing.T) {
	t.Parallel()
	_, err := task.ForPurge("q", task.StatusRunning)
	require.Equal(t, []string{"status"}, filterFields(t, err))
	f, err := task.ForPurge("q", task.StatusDead)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"queue": "q", "status": "DEAD"}, f.Fields())

	now := time.Unix(100, 0)
	for _, s := range task.Statuses {
		x := task.Restore(task.Snapshot{ID: uuid.New(), Queue: "q", Status: s})
		e, err := x.Purge(now)
		if s == task.StatusPending || s == task.StatusDead {
			require.NoError(t, err)
			require.Equal(t, event.TaskPurged, e.Type)
			require.Equal(t, string(s), e.From)
			require.Empty(t, e.To)
			require.Equal(t, s, x.Status(), "the task itself does not change")
			continue
		}
		var te *task.TransitionError
		require.ErrorAs(t, err, &te, "%s", s)
	}
}

func TestMetadataFilter(t *testing.T) {
	t.Parallel()
	s := pending()
	s.Metadata = map[string]string{"tenant": "acme", "region": "eu"}
	tk := task.Restore(s)
	require.True(t, task.Filter{}.Matches(tk))
	require.True(t, task.Filter{Metadata: map[string]string{"tenant": "acme"}}.Matches(tk))
	require.True(t, task.Filter{Metadata: map[string]string{"tenant": "acme", "region": "eu"}}.Matches(tk))
	require.False(t, task.Filter{Metadata: map[string]string{"tenant": "acme", "region": "us"}}.Matches(tk), "every pair")
	require.False(t, task.Filter{Metadata: map[string]string{"tenant": "ACME"}}.Matches(tk), "equality, case included")
	require.False(t, task.Filter{Metadata: map[string]string{"tenant": "acme"}}.Matches(task.Restore(pending())))
	require.False(t, task.Filter{Metadata: map[string]string{"missing": ""}}.Matches(tk), "an absent key is not an empty value")
	require.Equal(t, map[string]string{"queue": "q", "metadata.tenant": "acme"},
		task.Filter{Queue: "q", Metadata: map[string]string{"tenant": "acme"}}.Fields())
}
