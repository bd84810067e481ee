package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// The SDK speaks push queues (settings, the secret once, deliveries and
// attempts' HTTP status), verifies a delivery's signature
// (client.VerifySignature) and manages named limits; every answer matches
// docs/openapi.yaml.
func TestSDKPushQueuesAndLimits(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, nil)
	s := testserver.Start(t, pushConfig)
	v := spectest.New(t, s.URL)
	c := newSDK(t, s.URL, v.Transport(http.DefaultTransport))
	ctx := t.Context()

	set, err := c.UpdateQueue(ctx, "sdk-push", client.QueuePatch{Push: &client.PushPatch{URL: ep.URL, MaxInFlight: 3,
		Headers: map[string]string{"X-Token": "t0p"}}})
	require.NoError(t, err)
	require.NotEmpty(t, set.Push.Secret)
	require.Equal(t, []string{"X-Token"}, set.Push.HeaderNames)
	require.Equal(t, 3, set.Push.MaxInFlight)
	task, err := c.Submit(ctx, client.SubmitParams{Queue: "sdk-push", Payload: map[string]string{"hello": "world"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := c.Get(ctx, task.ID)
		return err == nil && got.Status == client.StatusDone
	}, 20*time.Second, 10*time.Millisecond)
	d := ep.deliveries()[0]
	require.Equal(t, task.ID, d.header.Get(client.HeaderTaskID))
	require.NoError(t, client.VerifySignature(set.Push.Secret, d.header.Get(client.HeaderSignature), d.body, 0))
	require.ErrorIs(t, client.VerifySignature("tmpush_wrong", d.header.Get(client.HeaderSignature), d.body, 0), client.ErrSignatureMismatch)
	require.ErrorIs(t, client.VerifySignature(set.Push.Secret, d.header.Get(client.HeaderSignature), []byte(`{}`), 0), client.ErrSignatureMismatch)
	require.ErrorIs(t, client.VerifySignature(set.Push.Secret, "t=1,v1=00", d.body, 0), client.ErrSignatureExpired)
	require.ErrorIs(t, client.VerifySignature(set.Push.Secret, "garbage", d.body, 0), client.ErrSignatureMalformed)
	attempts, err := c.Attempts(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, 200, attempts[0].HTTPStatus)
	require.Eventually(t, func() bool {
		q, err := c.Queue(ctx, "sdk-push")
		return err == nil && q.Deliveries != nil && q.Deliveries.Statuses["200"] == 1
	}, 10*time.Second, 10*time.Millisecond)

	overlap := time.Hour
	rotated, err := c.UpdateQueue(ctx, "sdk-push", client.QueuePatch{Push: &client.PushPatch{RotateSecret: true, SecretOverlap: &overlap},
		RateLimitPerGroup: &client.RateLimit{PerSecond: 2}})
	require.NoError(t, err)
	require.NotEqual(t, set.Push.Secret, rotated.Push.Secret)
	require.NotNil(t, rotated.Push.PreviousSecretExpiresAt)
	require.Equal(t, 2, rotated.RateLimitPerGroup.Burst)
	off, err := c.UpdateQueue(ctx, "sdk-push", client.QueuePatch{ClearPush: true})
	require.NoError(t, err)
	require.Nil(t, off.Push)

	rate, most := 10.0, 4
	l, created, err := c.PutLimit(ctx, "sdk-api", client.LimitParams{PerSecond: &rate, MaxRunning: &most})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 10, *l.Burst)
	_, created, err = c.PutLimit(ctx, "sdk-api", client.LimitParams{MaxRunning: &most})
	require.NoError(t, err)
	require.False(t, created)
	_, err = c.UpdateQueue(ctx, "sdk-limited", client.QueuePatch{Limits: []string{"sdk-api"}})
	require.NoError(t, err)
	l, err = c.Limit(ctx, "sdk-api")
	require.NoError(t, err)
	require.Equal(t, []string{"sdk-limited"}, l.Queues)
	require.Nil(t, l.PerSecond)
	all, err := c.Limits(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	_, err = c.DeleteLimit(ctx, "sdk-api")
	require.True(t, client.IsLimitInUse(err), "%v", err)
	_, err = c.UpdateQueue(ctx, "sdk-limited", client.QueuePatch{ClearLimits: true})
	require.NoError(t, err)
	gone, err := c.DeleteLimit(ctx, "sdk-api")
	require.NoError(t, err)
	require.Equal(t, 4, *gone.MaxRunning)
	_, err = c.Limit(ctx, "sdk-api")
	require.True(t, client.IsLimitNotFound(err), "%v", err)
	_, err = c.UpdateQueue(ctx, "x", client.QueuePatch{Limits: []string{"a"}, ClearLimits: true})
	require.Error(t, err, "set or clear, not both")
}
