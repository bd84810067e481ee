package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/cli"
	"github.com/taskmaster/taskmaster/domain/apikey"
)

// runCLIEnv runs one taskmaster command with env as its environment.
func runCLIEnv(t *testing.T, ctx context.Context, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errs bytes.Buffer
	err = cli.Run(ctx, args, cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errs,
		Getenv: func(k string) string { return env[k] }})
	return out.String(), errs.String(), err
}

// The first admin key is made on the database, before any key exists;
// with it, keys are listed, made and revoked through the server, and every
// command sends TASKMASTER_API_KEY.
func TestCLIKeys(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	ctx := context.Background()
	onDB := map[string]string{"TASKMASTER_DATABASE_URL": s.DatabaseURL}
	out, _, err := runCLIEnv(t, ctx, onDB, "keys", "create", "--name", "root", "--scope", "admin", "--json")
	require.NoError(t, err)
	var first map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &first), out)
	require.Len(t, first, 2, `--json prints {"id", "key"}: %s`, out)
	require.Regexp(t, `^tmk_`, first["key"])

	onServer := map[string]string{"TASKMASTER_URL": s.URL, "TASKMASTER_API_KEY": first["key"]}
	out, _, err = runCLIEnv(t, ctx, onServer, "keys", "create", "--name", "fleet", "--scope", "work,read",
		"--queues", "emails-*", "--worker-prefix", "fleet-", "--expires", "30d", "--json")
	require.NoError(t, err)
	var fleet map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &fleet), out)
	out, _, err = runCLIEnv(t, ctx, onServer, "keys", "list", "--json")
	require.NoError(t, err)
	var listed struct{ Keys []client.Key }
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	var got *client.Key
	for i := range listed.Keys {
		if listed.Keys[i].ID == fleet["id"] {
			got = &listed.Keys[i]
		}
	}
	require.NotNil(t, got, out)
	require.Equal(t, []string{"work", "read"}, got.Scopes)
	require.Equal(t, []string{"emails-*"}, got.Queues)
	require.Equal(t, "fleet-", *got.WorkerPrefix)
	require.WithinDuration(t, time.Now().Add(30*24*time.Hour), *got.ExpiresAt, time.Hour)
	out, _, err = runCLIEnv(t, ctx, onServer, "keys", "list")
	require.NoError(t, err)
	require.Contains(t, out, "fleet")
	require.NotContains(t, out, first["key"], "a listing never shows a token")

	// The fleet key works with the other commands, and not beyond its scopes.
	asFleet := map[string]string{"TASKMASTER_URL": s.URL, "TASKMASTER_API_KEY": fleet["key"]}
	_, _, err = runCLIEnv(t, ctx, asFleet, "queues")
	require.NoError(t, err)
	_, _, err = runCLIEnv(t, ctx, asFleet, "submit", "--queue", "emails-eu")
	require.True(t, client.IsForbidden(err), "%v", err)
	_, _, err = runCLIEnv(t, ctx, map[string]string{"TASKMASTER_URL": s.URL}, "queues")
	require.True(t, client.IsUnauthorized(err), "%v", err)

	out, _, err = runCLIEnv(t, ctx, onServer, "keys", "revoke", fleet["id"])
	require.NoError(t, err)
	require.Contains(t, out, "Revoked key "+fleet["id"])
	_, _, err = runCLIEnv(t, ctx, onDB, "keys", "revoke", first["id"])
	require.NoError(t, err, "revoking on the database works without a key")
	time.Sleep(application.DefaultKeyCacheTTL) // the server's lookup of the key lasts this long at most
	_, _, err = runCLIEnv(t, ctx, onServer, "keys", "list")
	require.True(t, client.IsUnauthorized(err), "the revoked admin key is refused: %v", err)

	_, _, err = runCLIEnv(t, ctx, onDB, "keys", "create", "--name", "x")
	require.ErrorIs(t, err, cli.ErrUsage, "a scope is required")
	_, _, err = runCLIEnv(t, ctx, onDB, "keys", "create", "--name", "x", "--scope", "root")
	require.ErrorContains(t, err, "scopes[0]")
	_, _, err = runCLIEnv(t, ctx, onDB, "keys", "rotate")
	require.ErrorIs(t, err, cli.ErrUsage)
}

// --out writes the key to a file readable by its owner only, and a second
// run keeps a key that still works: how the compose stack makes its admin
// key once.
func TestCLIKeysOutIsIdempotent(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	ctx := context.Background()
	env := map[string]string{"TASKMASTER_DATABASE_URL": s.DatabaseURL}
	path := filepath.Join(t.TempDir(), "admin-key.json")
	create := func() string {
		t.Helper()
		out, stderr, err := runCLIEnv(t, ctx, env, "keys", "create", "--name", "compose-admin", "--scope", "admin", "--out", path)
		require.NoError(t, err)
		require.Empty(t, out, "the token is not printed")
		return stderr
	}
	require.Contains(t, create(), "its token is in "+path)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var saved map[string]string
	require.NoError(t, json.Unmarshal(raw, &saved))
	s.anon.WithKey(saved["key"]).Do(http.MethodGet, "/admin/v1/keys", nil).Expect(t, http.StatusOK, nil)

	require.Contains(t, create(), "nothing created")
	var n int
	require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM api_keys WHERE name = 'compose-admin'`))
	require.Equal(t, 1, n)

	s.admin.Do(http.MethodDelete, "/admin/v1/keys/"+saved["id"], nil).Expect(t, http.StatusOK, nil)
	require.Contains(t, create(), "its token is in", "a revoked key is replaced")
	require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM api_keys WHERE name = 'compose-admin'`))
	require.Equal(t, 2, n)
}

// The SDK's Runner and `taskmaster worker --exec` work with a key; the SDK
// tells 401 and 403 apart and rides out a 429 after its Retry-After.
func TestSDKAndCLIWorkerWithAKey(t *testing.T) {
	t.Parallel()
	s := startSecured(t, func(c *app.Config) {
		c.HTTP.RateLimits[apikey.ScopeRead] = httpadapter.RateLimit{Rate: 1, Burst: 1}
	})
	_, producerKey := s.CreateKey(t, apikey.CreateParams{Name: "p", Scopes: []apikey.Scope{apikey.ScopeProduce}})
	_, workerKey := s.CreateKey(t, apikey.CreateParams{Name: "w", Scopes: []apikey.Scope{apikey.ScopeWork}})
	_, readKey := s.CreateKey(t, apikey.CreateParams{Name: "r", Scopes: []apikey.Scope{apikey.ScopeRead}})
	newClient := func(key string, rt http.RoundTripper) *client.Client {
		retries := sdkRetries
		if rt == nil {
			rt = http.DefaultTransport
		} else {
			retries = client.DefaultRetryPolicy() // waits up to 5 s, room for a Retry-After of 1
		}
		c, err := client.New(s.URL, client.WithAPIKey(key), client.WithRetryPolicy(retries),
			client.WithHTTPClient(&http.Client{Transport: rt, Timeout: 30 * time.Second}))
		require.NoError(t, err)
		return c
	}
	ctx := context.Background()
	producer := newClient(producerKey, nil)
	ids := submitN(t, producer, "sdk-auth", 6, func(i int) any { return i })

	_, err := newClient("", nil).Queues(ctx)
	require.True(t, client.IsUnauthorized(err), "%v", err)
	_, err = producer.Queues(ctx)
	require.True(t, client.IsForbidden(err), "%v", err)
	p, _ := client.AsProblem(err)
	require.Equal(t, []string{"read"}, p.RequiredScopes)

	stop, _ := startRunner(t, newClient(workerKey, nil), client.RunnerConfig{Queues: []string{"sdk-auth"}, WorkerID: "sdk-w"},
		func(ctx context.Context, task client.Task) (any, error) { return "ok", nil })
	stopCLI := func() func() error {
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, _, err := runCLIEnv(t, runCtx, map[string]string{"TASKMASTER_URL": s.URL, "TASKMASTER_API_KEY": workerKey},
				"worker", "--queue", "sdk-auth", "--exec", "echo done", "--id", "cli-w")
			done <- err
		}()
		return stopper(t, cancel, done, "taskmaster worker")
	}()
	admin := newClient(s.AdminKey(t), nil)
	for _, id := range ids {
		require.Eventually(t, func() bool {
			task, err := admin.Get(ctx, id)
			return err == nil && task.Status == client.StatusDone
		}, 60*time.Second, 20*time.Millisecond)
	}
	require.NoError(t, stop())
	require.NoError(t, stopCLI())
	require.Equal(t, 6, countRows(t, s.Server, `SELECT count(*) FROM tasks WHERE queue = 'sdk-auth' AND status = 'DONE'
		AND result::text IN ('"ok"', '"done"')`), "each done by the runner or the command")

	// A burst of one: the second read waits out the 429's Retry-After.
	var limited atomic.Int64
	reader := newClient(readKey, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && resp.StatusCode == http.StatusTooManyRequests {
			limited.Add(1)
		}
		return resp, err
	}))
	for range 2 {
		_, err := reader.Queues(ctx)
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, limited.Load(), int64(1), "the second call was limited, then retried")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
