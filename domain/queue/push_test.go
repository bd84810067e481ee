package queue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/validation"
)

func fields(t *testing.T, err error) []string {
	t.Helper()
	var v *validation.Error
	require.ErrorAs(t, err, &v)
	var out []string
	for _, f := range v.Fields {
		out = append(out, f.Field)
	}
	return out
}

func pushPatch(p queue.PushPatch) queue.Patch {
	return queue.Patch{Push: queue.Optional[queue.PushPatch]{Set: true, Value: &p}}
}

func str(s string) *string { return &s }
func num(n int) *int       { return &n }

// Turning push on fills the defaults; a later patch changes only what it
// names; null turns it off.
func TestPushPatchAppliesWithDefaults(t *testing.T) {
	t.Parallel()
	on := pushPatch(queue.PushPatch{URL: str("https://hooks.example.com/tasks"),
		Headers: queue.Optional[map[string]string]{Set: true, Value: &map[string]string{"authorization": "Bearer x", "X-Team": "a"}}})
	require.NoError(t, on.Validate())
	require.NoError(t, on.Check(queue.Settings{}))
	s := on.Apply(queue.Settings{})
	require.Equal(t, &queue.Push{URL: "https://hooks.example.com/tasks", TimeoutSeconds: 30, MaxInFlight: 10,
		HeaderNames: []string{"Authorization", "X-Team"}, NonRetryableStatuses: []int{400, 401, 403, 404, 410, 422}}, s.Push)
	require.True(t, s.Limited(), "max_in_flight caps a push queue")
	require.True(t, s.ClosedTo(false), "workers' claims pass a push queue by")
	require.False(t, s.ClosedTo(true))
	require.True(t, queue.Settings{}.ClosedTo(true), "dispatchers' claims pass other queues by")

	change := pushPatch(queue.PushPatch{MaxInFlight: num(3),
		NonRetryableStatuses: queue.Optional[[]int]{Set: true, Value: &[]int{422, 400, 422}}})
	require.NoError(t, change.Check(s))
	s2 := change.Apply(s)
	require.Equal(t, 3, s2.Push.MaxInFlight)
	require.Equal(t, []int{400, 422}, s2.Push.NonRetryableStatuses)
	require.Equal(t, "https://hooks.example.com/tasks", s2.Push.URL)
	require.Equal(t, 10, s.Push.MaxInFlight, "Apply leaves its input alone")

	off := queue.Patch{Push: queue.Optional[queue.PushPatch]{Set: true}}
	require.NoError(t, off.Validate())
	require.Nil(t, off.Apply(s2).Push)

	// Max in flight caps the queue's running tasks like max_running.
	st := queue.State{Settings: s2, Running: 2}
	require.Equal(t, 1, st.Allowance(time.Now()))
	st.Settings.MaxRunning = num(1)
	require.Equal(t, 0, st.Allowance(time.Now()))
}

func TestPushPatchIsChecked(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"push.url"}, fields(t, pushPatch(queue.PushPatch{MaxInFlight: num(2)}).Check(queue.Settings{})),
		"push cannot be turned on without a URL")
	require.Equal(t, []string{"push.url", "push.rotate_secret"}, fields(t, pushPatch(queue.PushPatch{RotateSecret: true}).Check(queue.Settings{})))

	bad := queue.PushPatch{
		URL: str("ftp://x"), TimeoutSeconds: num(0), MaxInFlight: num(10001),
		Headers: queue.Optional[map[string]string]{Set: true, Value: &map[string]string{
			"Taskmaster-Signature": "x", "bad header": "x", "X-Ok": "a\nb", "content-type": "text/plain"}},
		NonRetryableStatuses: queue.Optional[[]int]{Set: true, Value: &[]int{200, 99, 404}},
		SecretOverlapSeconds: num(5),
	}
	got := fields(t, pushPatch(bad).Validate())
	require.ElementsMatch(t, []string{"push.url", "push.timeout_seconds", "push.max_in_flight", "push.headers.Taskmaster-Signature",
		"push.headers.bad header", "push.headers.X-Ok", "push.headers.content-type", "push.non_retryable_statuses[0]",
		"push.non_retryable_statuses[1]", "push.secret_overlap_seconds"}, got)

	for _, u := range []string{"https://user:pw@example.com/", "https://example.com/#x", "/relative", "https://", "mailto:a@b",
		"https://example.com/" + strings.Repeat("a", 2100)} {
		require.Equal(t, []string{"push.url"}, fields(t, pushPatch(queue.PushPatch{URL: &u}).Validate()), u)
	}
	rotate := queue.PushPatch{RotateSecret: true, SecretOverlapSeconds: num(7*24*3600 + 1)}
	require.Equal(t, []string{"push.secret_overlap_seconds"}, fields(t, pushPatch(rotate).Validate()))
}

// A rotation keeps the replaced secret for the overlap; a rotation
// without overlap, or of a queue without a secret, keeps none.
func TestRotateSecretKeepsThePreviousForTheOverlap(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	p := &queue.Push{}
	p.RotateSecret("first", time.Hour, now)
	require.Equal(t, queue.PushSealed{Secret: "first"}, p.Sealed)
	require.Nil(t, p.PreviousSecretExpiresAt)
	p.RotateSecret("second", time.Hour, now.Add(time.Minute))
	require.Equal(t, queue.PushSealed{Secret: "second", PreviousSecret: "first"}, p.Sealed)
	require.Equal(t, now.Add(61*time.Minute), *p.PreviousSecretExpiresAt)
	require.Equal(t, now.Add(time.Minute), p.SecretRotatedAt)
	p.ForgetExpiredSecret(now.Add(60 * time.Minute))
	require.Equal(t, "first", p.Sealed.PreviousSecret, "still within the overlap")
	p.ForgetExpiredSecret(now.Add(61 * time.Minute))
	require.Empty(t, p.Sealed.PreviousSecret)
	require.Nil(t, p.PreviousSecretExpiresAt)
	p.RotateSecret("third", 0, now)
	require.Equal(t, queue.PushSealed{Secret: "third"}, p.Sealed)
}

func TestNamedLimits(t *testing.T) {
	t.Parallel()
	rate := 2.5
	l, err := queue.NewLimit("tenant-api", queue.LimitParams{PerSecond: &rate})
	require.NoError(t, err)
	require.Equal(t, queue.Limit{Name: "tenant-api", RateLimit: &queue.RateLimit{PerSecond: 2.5, Burst: 3}}, l, "burst defaults to a second's tokens")
	l, err = queue.NewLimit("db", queue.LimitParams{MaxRunning: num(4)})
	require.NoError(t, err)
	require.Nil(t, l.RateLimit)

	_, err = queue.NewLimit("x", queue.LimitParams{})
	require.Equal(t, []string{"limit"}, fields(t, err))
	_, err = queue.NewLimit("bad/name", queue.LimitParams{Burst: num(0), MaxRunning: num(0)})
	require.Equal(t, []string{"name", "burst", "max_running"}, fields(t, err))
	zero := 0.0
	_, err = queue.NewLimit("x", queue.LimitParams{PerSecond: &zero, Burst: num(0)})
	require.Equal(t, []string{"per_second", "burst"}, fields(t, err))

	now := time.Unix(100, 0)
	st := queue.LimitState{Limit: queue.Limit{RateLimit: &queue.RateLimit{PerSecond: 1, Burst: 5}, MaxRunning: num(3)}, Running: 1}
	require.Equal(t, 2, st.Allowance(now), "the least of the room and the tokens")
	st.Bucket = queue.Bucket{Tokens: 0.5, At: now}
	require.Equal(t, 0, st.Allowance(now))

	p := queue.Patch{Limits: queue.Optional[[]string]{Set: true, Value: &[]string{"a", "b", "a", "c/d"}}}
	require.Equal(t, []string{"limits[2]", "limits[3]"}, fields(t, p.Validate()))
	many := make([]string, 9)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	require.Equal(t, []string{"limits"}, fields(t, queue.Patch{Limits: queue.Optional[[]string]{Set: true, Value: &many}}.Validate()))
	s := queue.Patch{Limits: queue.Optional[[]string]{Set: true, Value: &[]string{"b", "a"}}}.Apply(queue.Settings{})
	require.Equal(t, []string{"b", "a"}, s.Limits, "kept in the operator's order")
	require.True(t, s.Limited())
	require.Nil(t, queue.Patch{Limits: queue.Optional[[]string]{Set: true, Value: &[]string{}}}.Apply(s).Limits)
}

// rate_limit_per_group: each group's allowance is the least of its room
// under max_running_per_group and its own bucket's tokens.
func TestGroupAllowance(t *testing.T) {
	t.Parallel()
	now := time.Unix(100, 0)
	s := queue.Settings{RateLimitPerGroup: &queue.RateLimit{PerSecond: 2, Burst: 4}}
	require.True(t, s.GroupLimited())
	require.Equal(t, 4, s.GroupAllowance(0, queue.Bucket{}, now), "a group without a bucket has a full one")
	require.Equal(t, 2, s.GroupAllowance(0, queue.Bucket{Tokens: 1, At: now.Add(-500 * time.Millisecond)}, now))
	s.MaxRunningPerGroup = num(3)
	require.Equal(t, 1, s.GroupAllowance(2, queue.Bucket{}, now))
	require.Equal(t, -1, queue.Settings{}.GroupAllowance(7, queue.Bucket{}, now))
}
