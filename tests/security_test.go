package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/adapters/ui"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// secured is a server with authentication on, an admin key, and a client
// that sends no key.
type secured struct {
	*testserver.Server
	anon  *testclient.Client
	admin *testclient.Client
}

func startSecured(t *testing.T, mutate func(*app.Config), extra ...fx.Option) secured {
	t.Helper()
	s := testserver.StartOn(t, pgtest.NewDatabase(t), func(c *app.Config) {
		c.HTTP.Auth = httpadapter.AuthOn
		if mutate != nil {
			mutate(c)
		}
	}, extra...)
	anon := testclient.New(t, s.URL)
	return secured{Server: s, anon: anon, admin: anon.WithKey(s.AdminKey(t))}
}

// key makes a key through the admin API and returns a client that sends
// it, with the key's id.
func (s secured) key(t *testing.T, body jsonObj) (*testclient.Client, string) {
	t.Helper()
	if body["name"] == nil {
		body["name"] = "k-" + uuid.NewString()[:8]
	}
	var created struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	r := s.admin.Do(http.MethodPost, "/admin/v1/keys", body).Expect(t, http.StatusCreated, &created)
	require.Equal(t, "/admin/v1/keys/"+created.ID, r.Header.Get("Location"))
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	require.Regexp(t, `^tmk_[0-9A-Za-z]{49}$`, created.Key)
	return s.anon.WithKey(created.Key), created.ID
}

// forbiddenProblem requires a 403 forbidden problem and returns its
// members.
func forbiddenProblem(t *testing.T, r *testclient.Response) map[string]any {
	t.Helper()
	r.Problem(t, http.StatusForbidden, "forbidden")
	var out map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &out))
	return out
}

// concrete fills a route template's variables.
func concrete(path string) string {
	return strings.NewReplacer("{id}", uuid.NewString()).Replace(path)
}

// Every route refuses a request without a key (401, with a Bearer
// challenge), with a key that is not one (401), and with a key that lacks
// the route's scope (403, naming it); the probes need nothing. The server
// is the real one, with every route, and every answer is checked against
// docs/openapi.yaml.
func TestAuthEveryRouteRefusesMissingKeysAndWrongScopes(t *testing.T) {
	t.Parallel()
	var srv *httpadapter.Server
	// Three refused tokens per route: more than a client address may send
	// (TASKMASTER_RATE_LIMIT_CLIENT); that limit has tests of its own.
	s := startSecured(t, func(c *app.Config) { c.HTTP.ClientRateLimit = httpadapter.RateLimit{} }, fx.Populate(&srv))
	v := spectest.New(t, s.URL)
	hc := v.Client()
	keys := map[apikey.Scope]string{}
	for _, scope := range apikey.Scopes() {
		_, keys[scope] = s.CreateKey(t, apikey.CreateParams{Name: string(scope), Scopes: []apikey.Scope{scope}})
	}
	send := func(method, path, auth string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, s.URL+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp
	}
	other, err := apikey.NewToken()
	require.NoError(t, err)
	checked := 0
	for _, r := range srv.Routes() {
		if strings.HasPrefix(r.Path, strings.TrimSuffix(ui.Prefix, "/")) {
			continue // the dashboard's HTML pages check their own sessions: tests/ui
		}
		for _, method := range r.Methods {
			path := concrete(r.Path)
			if r.Access.Public {
				require.Equal(t, http.StatusOK, send(method, path, "").StatusCode, "%s %s is public", method, r.Path)
				continue
			}
			for _, auth := range []string{"", "Bearer " + other, "Bearer not-a-key", "Basic dXNlcjpwYXNz"} {
				resp := send(method, path, auth)
				require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s with %q", method, r.Path, auth)
				require.True(t, strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), `Bearer realm="taskmaster"`), resp.Header)
			}
			for scope, token := range keys {
				if slices.ContainsFunc(r.Access.Scopes, func(s apikey.Scope) bool { return s == scope || scope == apikey.ScopeAdmin }) {
					continue
				}
				resp := send(method, path, "Bearer "+token)
				require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s with a %s key", method, r.Path, scope)
				require.Contains(t, resp.Header.Get("WWW-Authenticate"), `error="insufficient_scope"`)
				checked++
			}
		}
	}
	require.Greater(t, checked, 40, "most routes refuse most scopes")

	// The problem names the scope that is missing.
	r := s.anon.WithKey(keys[apikey.ScopeRead]).Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q"})
	require.Equal(t, []any{"produce"}, forbiddenProblem(t, r)["required_scopes"])
	r = s.anon.WithKey(keys[apikey.ScopeWork]).Do(http.MethodGet, "/tasks/v1", nil)
	require.ElementsMatch(t, []any{"read", "produce"}, forbiddenProblem(t, r)["required_scopes"])
	missing := s.anon.Do(http.MethodGet, "/queues/v1", nil).Problem(t, http.StatusUnauthorized, "unauthorized")
	require.Contains(t, missing.Detail, "Authorization: Bearer")
}

// A worker belongs to the key that registered it: another work key may not
// heartbeat, claim, report (whatever the lease it names) or re-register as
// it, and nothing changes; its own key may.
func TestAuthWorkKeyCannotActAsAnotherKeysWorker(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	a, _ := s.key(t, jsonObj{"scopes": []string{"work"}})
	b, _ := s.key(t, jsonObj{"scopes": []string{"work"}})
	producer, _ := s.key(t, jsonObj{"scopes": []string{"produce"}})
	producer.Submit(jsonObj{"queue": "q"})
	producer.Submit(jsonObj{"queue": "q"})
	a.Register(jsonObj{"id": "w-a", "queues": []string{"q"}})
	b.Register(jsonObj{"id": "w-b", "queues": []string{"q"}})
	held := a.Claim(jsonObj{"worker_id": "w-a"})
	require.Len(t, held, 1)
	task := held[0]
	require.NotEmpty(t, task.Lease(), "the claimer sees its lease")

	for _, r := range []*testclient.Response{
		b.Do(http.MethodPost, "/workers/v1/w-a/heartbeat", jsonObj{"tasks": []any{}}),
		b.Do(http.MethodPost, "/workers/v1/register", jsonObj{"id": "w-a", "queues": []string{"q"}}),
		b.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w-a"}),
		b.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/complete", jsonObj{"worker_id": "w-a", "lease_id": task.Lease()}),
		b.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/complete", jsonObj{"worker_id": "w-a", "lease_id": uuid.NewString()}),
		b.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/fail", jsonObj{"worker_id": "w-a", "lease_id": task.Lease(), "error": "x"}),
		b.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/extend", jsonObj{"worker_id": "w-a", "lease_id": task.Lease()}),
		b.Do(http.MethodPost, "/tasks/v1/complete", jsonObj{"worker_id": "w-a", "items": []jsonObj{{"id": task.ID, "lease_id": task.Lease()}}}),
		b.Do(http.MethodPost, "/tasks/v1/fail", jsonObj{"worker_id": "w-a", "items": []jsonObj{{"id": task.ID, "lease_id": task.Lease(), "error": "x"}}}),
		b.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w-a", "complete": []jsonObj{{"id": task.ID, "lease_id": task.Lease()}}}),
		b.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w-a", "fail": []jsonObj{{"id": task.ID, "lease_id": task.Lease()}}}),
	} {
		p := forbiddenProblem(t, r)
		require.Equal(t, "w-a", p["worker_id"], "%s", r)
		require.Contains(t, p["detail"], "belongs to another API key")
	}
	var got testclient.Task
	s.admin.Do(http.MethodGet, "/tasks/v1/"+task.ID, nil).Expect(t, http.StatusOK, &got)
	require.Equal(t, "RUNNING", got.Status)
	require.Equal(t, task.Lease(), got.Lease(), "nothing changed")
	var worker testclient.Worker
	a.Do(http.MethodPost, "/workers/v1/w-a/heartbeat", jsonObj{"tasks": []testclient.LeaseRef{task.Ref()}}).Expect(t, http.StatusOK, &worker)

	// With its own worker, b is just another worker: fencing answers it.
	b.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/complete", jsonObj{"worker_id": "w-b", "lease_id": task.Lease()}).
		Problem(t, http.StatusConflict, "lease-lost")
	done := a.Complete(task.ID, jsonObj{"worker_id": "w-a", "lease_id": task.Lease(), "result": 1})
	require.Equal(t, "DONE", done.Status)
}

// lease_id is shown only to the key of the holding worker and to admin:
// task reads, listings, repeated submissions and batch outcomes show null
// to others.
func TestAuthLeaseIDHiddenFromOtherKeys(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	a, _ := s.key(t, jsonObj{"scopes": []string{"work", "read"}})
	b, _ := s.key(t, jsonObj{"scopes": []string{"work", "read"}})
	producer, _ := s.key(t, jsonObj{"scopes": []string{"produce"}})
	reader, _ := s.key(t, jsonObj{"scopes": []string{"read"}})
	submitted := producer.Submit(jsonObj{"queue": "q", "idempotency_key": "k"})
	a.Register(jsonObj{"id": "w-a"})
	b.Register(jsonObj{"id": "w-b"})
	claimed := a.Claim(jsonObj{"worker_id": "w-a"})
	require.Len(t, claimed, 1)
	lease := claimed[0].Lease()
	require.NotEmpty(t, lease)

	seen := func(c *testclient.Client) string {
		t.Helper()
		got := c.Get(submitted.ID)
		require.Equal(t, "w-a", got.Holder(), "the holder is no secret")
		page := c.List("queue=q")
		require.Len(t, page.Tasks, 1)
		require.Equal(t, got.Lease(), page.Tasks[0].Lease())
		return got.Lease()
	}
	require.Equal(t, lease, seen(a))
	require.Equal(t, lease, seen(s.admin))
	require.Empty(t, seen(b))
	require.Empty(t, seen(producer))
	require.Empty(t, seen(reader))
	var again testclient.Task
	producer.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "idempotency_key": "k"}).Expect(t, http.StatusOK, &again)
	require.Equal(t, "RUNNING", again.Status)
	require.Nil(t, again.LeaseID, "nor in the answer to a repeated submission")
	var outcomes struct {
		Items []struct {
			Outcome string           `json:"outcome"`
			Task    *testclient.Task `json:"task"`
		} `json:"items"`
	}
	b.Do(http.MethodPost, "/tasks/v1/complete", jsonObj{"worker_id": "w-b", "items": []jsonObj{{"id": submitted.ID, "lease_id": lease}}}).
		Expect(t, http.StatusOK, &outcomes)
	require.Equal(t, "error", outcomes.Items[0].Outcome)
	require.Nil(t, outcomes.Items[0].Task.LeaseID, "nor in a refused batch item's task")

	// The event stream carries no lease ids at all.
	raw := readEvents(t, s.anon.WithKey(s.AdminKey(t)), s.URL, "queue=q", func() {
		a.Complete(submitted.ID, jsonObj{"worker_id": "w-a", "lease_id": lease})
	}, 1)
	require.NotContains(t, raw[0], lease)
}

// readEvents opens GET /events/v1?query with c's key, runs act, and
// returns the data of the first n events.
func readEvents(t *testing.T, c *testclient.Client, base, query string, act func(), n int) []string {
	t.Helper()
	var out []string
	return readEventsUntil(t, c, base, query, act, func(data string) bool {
		out = append(out, data)
		return len(out) == n
	})
}

// readEventsUntil opens GET /events/v1?query with c's key, runs act, and
// returns the data of the events up to the first that last accepts. The
// stream starts at the outbox's tail, which may still hold back events
// committed just before it opened: callers filter.
func readEventsUntil(t *testing.T, c *testclient.Client, base, query string, act func(), last func(data string) bool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := openStream(t, ctx, c, base+"/events/v1?"+query)
	defer resp.Body.Close()
	act()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, data)
			if last(data) {
				return out
			}
		}
	}
	require.FailNow(t, "the stream ended before the last event", "%v; got %v", sc.Err(), out)
	return nil
}

// Revoked and expired keys are refused, and a key revoked through one
// instance is refused by another within a second (the lookup cache's
// lifetime, 500 ms).
func TestAuthRevokedAndExpiredKeysAreRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	secure := func(c *app.Config) { c.HTTP.Auth = httpadapter.AuthOn }
	one := testserver.StartOn(t, db, secure)
	two := testserver.StartOn(t, db, secure)
	admin := testclient.New(t, one.URL).WithKey(one.AdminKey(t))
	var created struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	admin.Do(http.MethodPost, "/admin/v1/keys", jsonObj{"name": "w", "scopes": []string{"read"}}).Expect(t, http.StatusCreated, &created)
	onTwo := testclient.New(t, two.URL).WithKey(created.Key)
	onTwo.Do(http.MethodGet, "/queues/v1", nil).Expect(t, http.StatusOK, nil) // instance two now holds a lookup
	var revoked struct {
		RevokedAt *time.Time `json:"revoked_at"`
	}
	admin.Do(http.MethodDelete, "/admin/v1/keys/"+created.ID, nil).Expect(t, http.StatusOK, &revoked)
	require.NotNil(t, revoked.RevokedAt)
	after := time.Now()
	testclient.New(t, one.URL).WithKey(created.Key).Do(http.MethodGet, "/queues/v1", nil).
		Problem(t, http.StatusUnauthorized, "unauthorized") // at once where it was revoked
	// The bound under test: once the cache lifetime has passed since the
	// revocation, every instance refuses the key (however slow this machine
	// is, a later request only finds an older lookup).
	time.Sleep(application.DefaultKeyCacheTTL - time.Since(after))
	r := onTwo.Do(http.MethodGet, "/queues/v1", nil)
	p := r.Problem(t, http.StatusUnauthorized, "unauthorized")
	require.Equal(t, apikey.ErrRevoked.Error(), p.Detail)
	require.Contains(t, r.Header.Get("WWW-Authenticate"), `error="invalid_token"`)
	require.Less(t, application.DefaultKeyCacheTTL, time.Second, "revocation reaches every instance within a second")

	var listed struct {
		Keys []struct {
			ID        string     `json:"id"`
			RevokedAt *time.Time `json:"revoked_at"`
		} `json:"keys"`
	}
	admin.Do(http.MethodGet, "/admin/v1/keys", nil).Expect(t, http.StatusOK, &listed)
	require.True(t, slices.ContainsFunc(listed.Keys, func(k struct {
		ID        string     `json:"id"`
		RevokedAt *time.Time `json:"revoked_at"`
	}) bool {
		return k.ID == created.ID && k.RevokedAt != nil
	}), "a revoked key stays listed")

	// Expiry, on the database clock.
	id, token := one.CreateKey(t, apikey.CreateParams{Name: "e", Scopes: []apikey.Scope{apikey.ScopeRead}, ExpiresIn: time.Hour})
	expiring := testclient.New(t, two.URL).WithKey(token)
	expiring.Do(http.MethodGet, "/queues/v1", nil).Expect(t, http.StatusOK, nil)
	stage(t, one, `UPDATE api_keys SET expires_at = now() WHERE id = $1`, id)
	time.Sleep(application.DefaultKeyCacheTTL)
	p = expiring.Do(http.MethodGet, "/queues/v1", nil).Problem(t, http.StatusUnauthorized, "unauthorized")
	require.Equal(t, apikey.ErrExpired.Error(), p.Detail)
}

// A key limited to some queues works in them only: naming another queue is
// a 403 that names it; another queue's task is a 404 like a missing one;
// listings, statistics, workers and event streams show its queues only.
func TestAuthQueueLimitedKeySeesOnlyItsQueues(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	k, _ := s.key(t, jsonObj{"scopes": []string{"produce", "read", "work"}, "queues": []string{"emails-*"}})
	mine := k.Submit(jsonObj{"queue": "emails-eu"})
	p := forbiddenProblem(t, k.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "sms"}))
	require.Equal(t, "sms", p["queue"])
	forbiddenProblem(t, k.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": "emails-us"}, {"queue": "sms"}}}))
	theirs := s.admin.Submit(jsonObj{"queue": "sms"})

	k.Do(http.MethodGet, "/tasks/v1/"+theirs.ID, nil).Problem(t, http.StatusNotFound, "task-not-found")
	k.Do(http.MethodGet, "/tasks/v1/"+uuid.NewString(), nil).Problem(t, http.StatusNotFound, "task-not-found")
	require.Equal(t, mine.ID, k.Get(mine.ID).ID)
	page := k.List("")
	require.Len(t, page.Tasks, 1)
	require.Equal(t, mine.ID, page.Tasks[0].ID)
	forbiddenProblem(t, k.Do(http.MethodGet, "/tasks/v1?queue=sms", nil))
	forbiddenProblem(t, k.Do(http.MethodGet, "/events/v1?queue=sms", nil))

	k.Register(jsonObj{"id": "w-emails", "queues": []string{"emails-eu"}})
	require.Equal(t, "*", forbiddenProblem(t, k.Do(http.MethodPost, "/workers/v1/register", jsonObj{"id": "w-any"}))["queue"])
	s.admin.Register(jsonObj{"id": "w-sms", "queues": []string{"sms"}})
	forbiddenProblem(t, k.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w-emails", "queue": "sms"}))
	var workers struct {
		Workers []testclient.Worker `json:"workers"`
	}
	k.Do(http.MethodGet, "/workers/v1", nil).Expect(t, http.StatusOK, &workers)
	require.Len(t, workers.Workers, 1)
	require.Equal(t, "w-emails", workers.Workers[0].ID)
	qs := k.QueuesEventually(30*time.Second, func(qs []testclient.Queue) bool { return len(qs) == 1 })
	require.Len(t, qs, 1)
	require.Equal(t, "emails-eu", qs[0].Queue)

	// A report on another queue's task is answered as if it were missing.
	claimed := s.admin.Claim(jsonObj{"worker_id": "w-sms"})
	require.Len(t, claimed, 1)
	k.Do(http.MethodPost, "/tasks/v1/"+theirs.ID+"/complete", jsonObj{"worker_id": "w-emails", "lease_id": claimed[0].Lease()}).
		Problem(t, http.StatusNotFound, "task-not-found")
}

// A work key with a worker prefix acts only as workers whose id starts
// with it.
func TestAuthWorkerPrefixIsEnforced(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	k, _ := s.key(t, jsonObj{"scopes": []string{"work"}, "worker_prefix": "fleet-a."})
	p := forbiddenProblem(t, k.Do(http.MethodPost, "/workers/v1/register", jsonObj{"id": "fleet-b.1"}))
	require.Equal(t, "fleet-b.1", p["worker_id"])
	require.Contains(t, p["detail"], `"fleet-a."`)
	require.Equal(t, "fleet-a.1", k.Register(jsonObj{"id": "fleet-a.1"}).ID)
	require.True(t, strings.HasPrefix(k.Register(nil).ID, "fleet-a."), "a generated id starts with the prefix")
	s.admin.Register(jsonObj{"id": "fleet-b.1"})
	forbiddenProblem(t, k.Do(http.MethodPost, "/workers/v1/fleet-b.1/heartbeat", nil))
	forbiddenProblem(t, k.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "fleet-b.1"}))
	s.admin.Do(http.MethodPost, "/admin/v1/keys", jsonObj{"name": "x", "scopes": []string{"read"}, "worker_prefix": "p"}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
}

// The database holds no key in plain text: every table's every row, as
// text, is searched for the tokens (and their secret part) of keys made
// through the API and on the database.
func TestAuthDatabaseHoldsNoKeyInPlainText(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	_, adminToken := s.CreateKey(t, apikey.CreateParams{Name: "db", Scopes: []apikey.Scope{apikey.ScopeAdmin}})
	tokens := []string{adminToken}
	for range 3 {
		var created struct {
			Key string `json:"key"`
		}
		s.admin.Do(http.MethodPost, "/admin/v1/keys", jsonObj{"name": "api", "scopes": []string{"work", "produce"}}).
			Expect(t, http.StatusCreated, &created)
		tokens = append(tokens, created.Key)
		c := s.anon.WithKey(created.Key)
		c.Submit(jsonObj{"queue": "q", "payload": jsonObj{"n": 1}})
		c.Register(jsonObj{"id": "w-" + uuid.NewString()})
	}
	var tables []string
	require.NoError(t, s.DB.Select(&tables, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name)
		FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE'`))
	require.Contains(t, tables, "public.api_keys")
	var dump strings.Builder
	for _, table := range tables {
		var rows []string
		require.NoError(t, s.DB.Select(&rows, `SELECT t::text FROM `+table+` t`), table)
		for _, row := range rows {
			dump.WriteString(row + "\n")
		}
	}
	require.Contains(t, dump.String(), "api", "the dump holds the keys' rows")
	for _, token := range tokens {
		require.NotContains(t, dump.String(), token)
		require.NotContains(t, dump.String(), token[len(apikey.TokenPrefix):len(apikey.TokenPrefix)+20], "not even part of the secret")
	}
}

// A key over its rate limit gets 429 with Retry-After; every keyed answer
// carries the RateLimit fields.
func TestAuthRateLimit(t *testing.T) {
	t.Parallel()
	// One request per 100 s after a burst of 2: no machine is slow enough
	// to refill the bucket during the test.
	s := startSecured(t, func(c *app.Config) { c.HTTP.RateLimits[apikey.ScopeRead] = httpadapter.RateLimit{Rate: 0.01, Burst: 2} })
	reader, _ := s.key(t, jsonObj{"scopes": []string{"read"}})
	for remaining := range []int{1, 0} {
		r := reader.Do(http.MethodGet, "/queues/v1", nil).Expect(t, http.StatusOK, nil)
		require.Equal(t, "2", r.Header.Get("RateLimit-Limit"))
		require.Equal(t, strconv.Itoa(1-remaining), r.Header.Get("RateLimit-Remaining"))
		require.NotEmpty(t, r.Header.Get("RateLimit-Reset"))
	}
	r := reader.Do(http.MethodGet, "/queues/v1", nil)
	p := r.Problem(t, http.StatusTooManyRequests, "rate-limited")
	require.NotEmpty(t, p.Detail)
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err, r.Header)
	require.GreaterOrEqual(t, retry, 1)
	require.LessOrEqual(t, retry, 100)
	require.Equal(t, "0", r.Header.Get("RateLimit-Remaining"))
	// Another key has a bucket of its own.
	s.admin.Do(http.MethodGet, "/queues/v1", nil).Expect(t, http.StatusOK, nil)
	// Without a key there is nothing to limit: 401, not 429.
	s.anon.Do(http.MethodGet, "/queues/v1", nil).Problem(t, http.StatusUnauthorized, "unauthorized")
}

// Every admin action is an audit event in the outbox with the acting key,
// on the event stream (type=audit.*), and the projections ignore them.
func TestAuthAdminActionsAreAudited(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	var adminKeyID string
	require.NoError(t, s.DB.Get(&adminKeyID, `SELECT id FROM api_keys`))
	w, _ := s.key(t, jsonObj{"scopes": []string{"work"}})
	dead := s.admin.Submit(jsonObj{"queue": "audited", "max_attempts": 1})
	w.Register(jsonObj{"id": "w", "queues": []string{"audited"}})
	claimed := w.Claim(jsonObj{"worker_id": "w"})
	w.Fail(dead.ID, jsonObj{"worker_id": "w", "lease_id": claimed[0].Lease(), "error": "x", "retryable": false})

	var revokedID string
	events := readEventsUntil(t, s.admin, s.URL, "type=audit.*", func() {
		s.admin.Do(http.MethodPost, "/tasks/v1/"+dead.ID+"/retry", nil).Expect(t, http.StatusOK, nil)
		s.admin.Do(http.MethodPost, "/tasks/v1/"+dead.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
		s.admin.Do(http.MethodPost, "/workers/v1/w/drain", nil).Expect(t, http.StatusOK, nil)
		_, revokedID = s.key(t, jsonObj{"scopes": []string{"read"}})
		s.admin.Do(http.MethodDelete, "/admin/v1/keys/"+revokedID, nil).Expect(t, http.StatusOK, nil)
	}, func(data string) bool { return strings.Contains(data, `"audit.key_revoked"`) })
	type audit struct {
		Type        string `json:"type"`
		KeyID       string `json:"key_id"`
		TargetKeyID string `json:"target_key_id"`
		TaskID      string `json:"task_id"`
		Queue       string `json:"queue"`
		WorkerID    string `json:"worker_id"`
	}
	var got []audit
	for _, data := range events {
		var a audit
		require.NoError(t, json.Unmarshal([]byte(data), &a))
		if a.Type == "audit.key_created" && a.TargetKeyID != revokedID {
			continue // the admin and work keys, made just before the stream opened
		}
		got = append(got, a)
	}
	require.Equal(t, []audit{
		{Type: "audit.task_retried", KeyID: adminKeyID, TaskID: dead.ID, Queue: "audited"},
		{Type: "audit.task_cancelled", KeyID: adminKeyID, TaskID: dead.ID, Queue: "audited"},
		{Type: "audit.worker_drained", KeyID: adminKeyID, WorkerID: "w"},
		{Type: "audit.key_created", KeyID: adminKeyID, TargetKeyID: revokedID},
		{Type: "audit.key_revoked", KeyID: adminKeyID, TargetKeyID: revokedID},
	}, got)

	// The statistics count transitions, not audit events.
	qs := s.admin.QueuesEventually(30*time.Second, func(qs []testclient.Queue) bool {
		return len(qs) == 1 && qs[0].Dead == 1
	})
	require.Equal(t, []testclient.QueueCounts{{Queue: "audited", Dead: 1, ActiveWorkers: 1}}, testclient.Counts(qs), fmt.Sprint(qs))
}

// An event stream opened with a key ends once the key is revoked, like
// every other request of that key.
func TestAuthEventStreamEndsWhenItsKeyIsRevoked(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	reader, id := s.key(t, jsonObj{"scopes": []string{"read"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := openStream(t, ctx, reader, s.URL+"/events/v1")
	defer resp.Body.Close()
	s.admin.Do(http.MethodDelete, "/admin/v1/keys/"+id, nil).Expect(t, http.StatusOK, nil)
	_, err := io.Copy(io.Discard, resp.Body) // returns when the server ends the stream
	require.NoError(t, err, "the server ended the stream before the test's deadline")
	require.NoError(t, ctx.Err())
}

// openStream opens an event stream at url with c's key, until ctx ends.
func openStream(t *testing.T, ctx context.Context, c *testclient.Client, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header = c.Header()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return resp
}
