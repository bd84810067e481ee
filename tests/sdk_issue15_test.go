package tests

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// The SDK speaks unique keys, retry policies, snoozes and schedules.
func TestSDKUniqueKeysRetryAndSchedules(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, fastScheduler)
	c := newSDK(t, s.URL, nil)
	ctx := t.Context()

	first, err := c.Submit(ctx, client.SubmitParams{Queue: "q", UniqueKey: "k",
		Retry: &client.Backoff{Base: 250 * time.Millisecond, Jitter: client.JitterFull}})
	require.NoError(t, err)
	require.Equal(t, "k", first.UniqueKey)
	require.Equal(t, &client.Backoff{Base: 250 * time.Millisecond, Max: 5 * time.Minute, Jitter: client.JitterFull}, first.Retry)
	again, err := c.Submit(ctx, client.SubmitParams{Queue: "q", UniqueKey: "k"})
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)

	sc, err := c.CreateSchedule(ctx, client.ScheduleParams{Name: "sdk", Cron: "@every 1s", Overlap: client.OverlapAllow,
		Task: client.ScheduleTask{Queue: "sdk-ticks", Payload: map[string]int{"n": 1}, Tags: []string{"t"}}})
	require.NoError(t, err)
	require.Equal(t, "UTC", sc.Timezone)
	require.Equal(t, 3, sc.Task.MaxAttempts)
	require.JSONEq(t, `{"n":1}`, string(sc.Task.Payload.(json.RawMessage)))
	_, err = c.CreateSchedule(ctx, client.ScheduleParams{Name: "sdk", Cron: "@daily", Task: client.ScheduleTask{Queue: "q"}})
	require.True(t, client.IsScheduleExists(err), "%v", err)
	_, err = c.CreateSchedule(ctx, client.ScheduleParams{Name: "bad", Cron: "@every 1ms", Task: client.ScheduleTask{Queue: "q"}})
	require.True(t, client.IsValidation(err), "%v", err)

	require.Eventually(t, func() bool {
		got, err := c.Schedule(ctx, "sdk")
		return err == nil && got.LastTaskID != ""
	}, 30*time.Second, 10*time.Millisecond, "the schedule ticks")
	paused, err := c.PauseSchedule(ctx, "sdk")
	require.NoError(t, err)
	require.True(t, paused.Paused)
	require.Nil(t, paused.NextRunAt)
	resumed, err := c.ResumeSchedule(ctx, "sdk")
	require.NoError(t, err)
	require.NotNil(t, resumed.NextRunAt)
	cron := "@every 1h"
	updated, err := c.UpdateSchedule(ctx, "sdk", client.SchedulePatch{Cron: &cron})
	require.NoError(t, err)
	require.Equal(t, "@every 1h", updated.Cron)
	all, err := c.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	deleted, err := c.DeleteSchedule(ctx, "sdk")
	require.NoError(t, err)
	require.Equal(t, "sdk", deleted.Name)
	_, err = c.Schedule(ctx, "sdk")
	require.True(t, client.IsScheduleNotFound(err), "%v", err)
}

// A Runner handler snoozes its task by returning client.Snooze: the task
// comes back later without having spent an attempt.
func TestSDKRunnerSnooze(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	c := newSDK(t, s.URL, nil)
	task, err := c.Submit(t.Context(), client.SubmitParams{Queue: "snoozy", MaxAttempts: 1})
	require.NoError(t, err)
	var calls atomic.Int32
	stop, _ := startRunner(t, c, client.RunnerConfig{Queues: []string{"snoozy"}}, func(ctx context.Context, tk client.Task) (any, error) {
		if calls.Add(1) == 1 {
			return nil, client.Snooze(500 * time.Millisecond) // rounded up to 1 s
		}
		return "done", nil
	})
	require.Eventually(t, func() bool {
		got, err := c.Get(t.Context(), task.ID)
		return err == nil && got.Status == client.StatusDone
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())
	got, err := c.Get(t.Context(), task.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.Attempts, "the snoozed claim gave its attempt back")
	require.Equal(t, 1, got.Snoozes)
	require.EqualValues(t, 2, calls.Load())
	d, ok := client.SnoozeDelay(client.Snooze(time.Minute))
	require.True(t, ok)
	require.Equal(t, time.Minute, d)
}
