package tests

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/cli"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// `taskmaster queue set --push-url ...` makes a push queue and prints its
// secret once; `queue show` shows the delivery (no secret, no header
// value) and its recent deliveries; `taskmaster limits` manages named
// limits that `queue set --limits` names.
func TestCLIPushQueuesAndLimits(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, nil)
	s := testserver.Start(t, pushConfig)
	url := s.URL

	out := mustCLI(t, url, "queue", "set", "cli-push", "--push-url", ep.URL+"/in", "--push-timeout", "5",
		"--push-max-in-flight", "2", "--push-header", "Authorization: Bearer cli-token", "--push-non-retryable", "400,410")
	require.Contains(t, out, "push to "+ep.Listener.Addr().String()+" (timeout 5s, max in flight 2)")
	secret := regexp.MustCompile(`push signing secret \(shown once, keep it\): (tmpush_\S+)`).FindStringSubmatch(out)
	require.Len(t, secret, 2, out)
	task := cliSubmit(t, url, "--queue", "cli-push", "--payload", `{"n":7}`)
	c := testclient.New(t, url)
	waitStatus(t, c, task.ID, "DONE", 20*time.Second)
	d := ep.deliveries()[0]
	require.NoError(t, client.VerifySignature(secret[1], d.header.Get(client.HeaderSignature), d.body, 0))
	require.Equal(t, "Bearer cli-token", d.header.Get("Authorization"))
	require.Eventually(t, func() bool {
		out = mustCLI(t, url, "queue", "show", "cli-push")
		return regexp.MustCompile(`deliveries\s+in flight 0; last 1: 200 ×1`).MatchString(out)
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, out, "headers Authorization")
	require.NotContains(t, out, "cli-token")
	require.NotContains(t, out, secret[1])
	out = mustCLI(t, url, "queue", "set", "cli-push", "--rotate-secret", "--secret-overlap", "1h", "--json")
	var rotated client.QueueSettingsResult
	require.NoError(t, json.Unmarshal([]byte(out), &rotated), out)
	require.NotEqual(t, secret[1], rotated.Push.Secret)
	require.NotNil(t, rotated.Push.PreviousSecretExpiresAt)
	require.NotContains(t, mustCLI(t, url, "queue", "set", "cli-push", "--push-url", "none"), "push to")

	out = mustCLI(t, url, "limits", "set", "cli-api", "--rate", "120/m", "--max-running", "3")
	require.Regexp(t, `cli-api\s+2/s burst 2\s+3\s+0\s+2.0\s+-`, out)
	out = mustCLI(t, url, "queue", "set", "cli-a", "--limits", "cli-api", "--rate-per-group", "5/s", "--burst-per-group", "10")
	require.Contains(t, out, "rate per group 5/s burst 10, limits cli-api")
	require.Regexp(t, `cli-api\s+.*\s+cli-a`, mustCLI(t, url, "limits", "list"))
	require.Contains(t, mustCLI(t, url, "limits", "show", "cli-api", "--json"), `"queues": [`)
	_, err := runCLI(t, context.Background(), url, "", "limits", "delete", "cli-api")
	require.True(t, client.IsLimitInUse(err), "%v", err)
	mustCLI(t, url, "queue", "set", "cli-a", "--limits", "none")
	require.Contains(t, mustCLI(t, url, "limits", "delete", "cli-api"), "cli-api")
	_, err = runCLI(t, context.Background(), url, "", "limits", "show", "cli-api")
	require.True(t, client.IsLimitNotFound(err), "%v", err)

	for _, args := range [][]string{
		{"limits"}, {"limits", "set", "x"}, {"limits", "set", "x", "--burst", "3", "--max-running", "1"}, {"limits", "frob"},
		{"queue", "set", "q"}, {"queue", "set", "q", "--secret-overlap", "1h"}, {"queue", "set", "q", "--push-url", "none", "--push-timeout", "3"},
		{"queue", "set", "q", "--push-header", "no colon"}, {"queue", "set", "q", "--burst-per-group", "3"},
	} {
		_, err := runCLI(t, context.Background(), url, "", args...)
		require.True(t, errors.Is(err, cli.ErrUsage), "%v: %v", args, err)
	}
}
