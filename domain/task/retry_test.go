package task_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

func jitter(j backoff.Jitter) *backoff.Jitter { return &j }

// submitted returns a task submitted at base with retry and claimed, on its
// first attempt.
func submittedWithRetry(t *testing.T, retry *task.RetryParams) *task.Task {
	t.Helper()
	tk, _, err := task.Submit(task.SubmitParams{ID: taskID, Queue: "emails", MaxAttempts: ptr(5), Retry: retry}, base)
	require.NoError(t, err)
	_, err = tk.Claim(task.ClaimParams{WorkerID: holder, LeaseID: leaseID, LeaseSeconds: 60}, base)
	require.NoError(t, err)
	return tk
}

// A task's own retry policy replaces the server's: without jitter the delay
// is exact, min(2^attempts x base, max).
func TestFailUsesTheTasksOwnRetryPolicy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		retry *task.RetryParams
		want  time.Duration
	}{
		{"server policy", nil, 2 * time.Second}, // policy: 2^1 x 1 s
		{"own base", &task.RetryParams{BaseSeconds: secs(0.25)}, 500 * time.Millisecond},
		{"own cap", &task.RetryParams{BaseSeconds: secs(10), MaxSeconds: secs(15)}, 15 * time.Second},
		{"explicit none", &task.RetryParams{BaseSeconds: secs(3), Jitter: jitter(backoff.JitterNone)}, 6 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := submittedWithRetry(t, c.retry)
			now := at(10 * time.Second)
			_, err := tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Error: "x", Retryable: true,
				Rand: func() float64 { return 0.5 }}, policy, now)
			require.NoError(t, err)
			require.Equal(t, now.Add(c.want), tk.Snapshot().RunAt)
		})
	}
}

// Full jitter waits between zero and the delay, as the source says; the
// domain draws no randomness of its own.
func TestFailWithFullJitter(t *testing.T) {
	t.Parallel()
	retry := func() *task.RetryParams {
		return &task.RetryParams{BaseSeconds: secs(4), MaxSeconds: secs(100), Jitter: jitter(backoff.JitterFull)}
	}
	now := at(10 * time.Second)
	for _, c := range []struct {
		rand float64
		want time.Duration
	}{{0, 0}, {0.25, 2 * time.Second}, {0.999, 7992 * time.Millisecond}} {
		tk := submittedWithRetry(t, retry())
		_, err := tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Retryable: true,
			Rand: func() float64 { return c.rand }}, policy, now)
		require.NoError(t, err)
		require.Equal(t, now.Add(c.want), tk.Snapshot().RunAt, "rand %v", c.rand)
	}
	// Without a source the delay is its longest.
	tk := submittedWithRetry(t, retry())
	_, err := tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Retryable: true}, policy, now)
	require.NoError(t, err)
	require.Equal(t, now.Add(8*time.Second), tk.Snapshot().RunAt)
}

func TestSubmitKeepsTheRetryPolicyAndUniqueKey(t *testing.T) {
	t.Parallel()
	tk, _, err := task.Submit(task.SubmitParams{ID: taskID, Queue: "q", UniqueKey: ptr("report:42"),
		Retry: &task.RetryParams{BaseSeconds: secs(1.5)}}, base)
	require.NoError(t, err)
	s := tk.Snapshot()
	require.Equal(t, "report:42", s.UniqueKey)
	require.Equal(t, &backoff.Policy{Base: 1500 * time.Millisecond, Cap: 300 * time.Second, Jitter: backoff.JitterNone}, s.Retry,
		"max defaults to 300 s, jitter to none")
	s.Retry.Base = time.Hour
	require.Equal(t, 1500*time.Millisecond, tk.Snapshot().Retry.Base, "the snapshot is a copy")

	big, _, err := task.Submit(task.SubmitParams{ID: taskID, Queue: "q", Retry: &task.RetryParams{BaseSeconds: secs(600)}}, base)
	require.NoError(t, err)
	require.Equal(t, 600*time.Second, big.Snapshot().Retry.Cap, "max defaults to the base when that is larger")
}

func TestValidateSubmitUniqueKeyAndRetry(t *testing.T) {
	t.Parallel()
	long := make([]byte, task.MaxUniqueKeyLength+1)
	for i := range long {
		long[i] = 'k'
	}
	cases := []struct {
		name string
		p    task.SubmitParams
		want []string
	}{
		{"empty unique key", task.SubmitParams{UniqueKey: ptr("")}, []string{"unique_key"}},
		{"long unique key", task.SubmitParams{UniqueKey: ptr(string(long))}, []string{"unique_key"}},
		{"control character", task.SubmitParams{UniqueKey: ptr("a\nb")}, []string{"unique_key"}},
		{"longest unique key", task.SubmitParams{UniqueKey: ptr(string(long[1:]))}, nil},
		{"non-ASCII unique key", task.SubmitParams{UniqueKey: ptr("rapport-été")}, nil},
		{"retry without base", task.SubmitParams{Retry: &task.RetryParams{MaxSeconds: secs(10)}}, []string{"retry.base_seconds"}},
		{"base too small", task.SubmitParams{Retry: &task.RetryParams{BaseSeconds: secs(0.09)}}, []string{"retry.base_seconds"}},
		{"base too large", task.SubmitParams{Retry: &task.RetryParams{BaseSeconds: secs(3601)}}, []string{"retry.base_seconds"}},
		{"max under base", task.SubmitParams{Retry: &task.RetryParams{BaseSeconds: secs(5), MaxSeconds: secs(4)}}, []string{"retry.max_seconds"}},
		{"max too large", task.SubmitParams{Retry: &task.RetryParams{BaseSeconds: secs(5), MaxSeconds: secs(7*86400 + 1)}}, []string{"retry.max_seconds"}},
		{"bad jitter", task.SubmitParams{Retry: &task.RetryParams{BaseSeconds: secs(1), Jitter: jitter("half")}}, []string{"retry.jitter"}},
		{"bounds", task.SubmitParams{Retry: &task.RetryParams{BaseSeconds: secs(0.1), MaxSeconds: secs(7 * 86400), Jitter: jitter(backoff.JitterFull)}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.p.Queue = "q"
			err := task.ValidateSubmit(&c.p)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			var verr *validation.Error
			require.ErrorAs(t, err, &verr)
			require.Equal(t, c.want, fields(verr))
		})
	}
}
