package task_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

func report(pct float64, msg string) task.ProgressParams {
	return task.ProgressParams{WorkerID: holder, LeaseID: leaseID, Percent: pct, Message: msg}
}

func TestProgressIsStoredAndAnnounced(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(1))
	p := report(40, "copying")
	p.Details = json.RawMessage(`{"files":4}`)
	now := at(10 * time.Second)
	ev, ok, err := tk.ReportProgress(p, now)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, tk.ProgressChanged())
	want := taskEvent(event.TaskProgress, task.StatusRunning, task.StatusRunning, "", 1, holder, now)
	want.Progress = &event.Progress{Percent: 40, Message: "copying", Details: json.RawMessage(`{"files":4}`)}
	require.Equal(t, want, ev)
	v := tk.Snapshot()
	require.Equal(t, &task.Progress{Percent: 40, Message: "copying", Details: json.RawMessage(`{"files":4}`), UpdatedAt: now, EventAt: now}, v.Progress)
	require.Equal(t, task.StatusRunning, v.Status, "progress is no transition")
	_, due := tk.ProgressDue()
	require.False(t, due, "announced already")
}

// At most one task.progress event per task per second: a report within
// the second is kept and announced by FlushProgress once the second is
// over, with the latest values.
func TestProgressEventsAreCoalesced(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(1))
	_, ok, err := tk.ReportProgress(report(10, "a"), at(10*time.Second))
	require.NoError(t, err)
	require.True(t, ok)
	for i, d := range []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, 999 * time.Millisecond} {
		_, ok, err := tk.ReportProgress(report(float64(20+i), "b"), at(10*time.Second+d))
		require.NoError(t, err)
		require.False(t, ok, d)
	}
	require.Equal(t, 22.0, tk.Snapshot().Progress.Percent, "the latest report is kept")
	due, ok := tk.ProgressDue()
	require.True(t, ok)
	require.Equal(t, at(11*time.Second), due)
	_, ok = tk.FlushProgress(at(10*time.Second + 999*time.Millisecond))
	require.False(t, ok, "not before the second is over")
	ev, ok := tk.FlushProgress(at(11 * time.Second))
	require.True(t, ok)
	require.Equal(t, 22.0, ev.Progress.Percent)
	require.Equal(t, at(11*time.Second), ev.OccurredAt)
	_, ok = tk.FlushProgress(at(20 * time.Second))
	require.False(t, ok, "announced once")
	_, ok, err = tk.ReportProgress(report(30, "c"), at(12*time.Second))
	require.NoError(t, err)
	require.True(t, ok, "a second after the last event")
}

// A task that left RUNNING has nothing to announce: its transition's event
// came after the report.
func TestProgressIsNotFlushedAfterTheAttempt(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(1))
	_, _, err := tk.ReportProgress(report(10, "a"), at(10*time.Second))
	require.NoError(t, err)
	_, _, err = tk.ReportProgress(report(90, "b"), at(10500*time.Millisecond))
	require.NoError(t, err)
	_, err = tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: leaseID}, at(10600*time.Millisecond))
	require.NoError(t, err)
	_, ok := tk.FlushProgress(at(time.Minute))
	require.False(t, ok)
	require.Equal(t, 90.0, tk.Snapshot().Progress.Percent, "the last report stays visible")
}

func TestProgressIsFenced(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]task.ProgressParams{
		"another worker": {WorkerID: "worker-2", LeaseID: leaseID, Percent: 1},
		"a stale lease":  {WorkerID: holder, LeaseID: staleID, Percent: 1},
	} {
		tk := task.Restore(running(1))
		before := tk.Snapshot()
		_, _, err := tk.ReportProgress(p, at(10*time.Second))
		require.ErrorIs(t, err, task.ErrLeaseLost, name)
		require.Equal(t, before, tk.Snapshot(), name)
		require.False(t, tk.ProgressChanged())
	}
	_, _, err := task.Restore(pending()).ReportProgress(report(1, ""), at(time.Second))
	require.ErrorIs(t, err, task.ErrLeaseLost, "taken back")
	var terr *task.TransitionError
	_, _, err = task.Restore(done()).ReportProgress(report(1, ""), at(time.Minute))
	require.ErrorAs(t, err, &terr)
}

func TestProgressIsValidated(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		p     task.ProgressParams
		field string
	}{
		"negative":          {report(-1, ""), "percent"},
		"above 100":         {report(100.5, ""), "percent"},
		"NaN":               {report(math.NaN(), ""), "percent"},
		"long message":      {report(1, strings.Repeat("x", 1025)), "message"},
		"message not UTF-8": {report(1, "\xff"), "message"},
		"details too long":  {task.ProgressParams{WorkerID: holder, LeaseID: leaseID, Details: json.RawMessage(`"` + strings.Repeat("x", 16<<10) + `"`)}, "details"},
		"details not JSON":  {task.ProgressParams{WorkerID: holder, LeaseID: leaseID, Details: json.RawMessage(`{`)}, "details"},
	}
	for name, c := range cases {
		tk := task.Restore(running(1))
		_, _, err := tk.ReportProgress(c.p, at(10*time.Second))
		var verr *validation.Error
		require.ErrorAs(t, err, &verr, name)
		require.Equal(t, c.field, verr.Fields[0].Field, name)
	}
	for _, pct := range []float64{0, 33.3, 100} {
		_, _, err := task.Restore(running(1)).ReportProgress(report(pct, strings.Repeat("x", 1024)), at(10*time.Second))
		require.NoError(t, err, pct)
	}
}
