package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// createKey stores a key made from p in its own transaction and returns it
// with its token.
func (f *storeFixture) createKey(p apikey.CreateParams) (*apikey.Key, string) {
	f.t.Helper()
	token, err := apikey.NewToken()
	require.NoError(f.t, err)
	var out *apikey.Key
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Keys.Create(ctx, func(now time.Time) (*apikey.Key, []event.Event, error) {
			k, err := apikey.Create(p, uuid.Must(uuid.NewV7()), apikey.Hash(token), now)
			return k, []event.Event{event.Audit(event.AuditKeyCreated, "", now)}, err
		})
		return err
	})
	return out, token
}

func TestKeyStoreRoundTrip(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	var usable bool
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		usable, err = st.Keys.Usable(ctx)
		return err
	})
	require.False(t, usable, "a fresh database has no key")

	k, token := f.createKey(apikey.CreateParams{Name: "ci", Scopes: []apikey.Scope{apikey.ScopeWork, apikey.ScopeRead},
		Queues: []string{"emails-*", "sms"}, WorkerPrefix: "ci-", ExpiresIn: time.Hour})
	want := k.Snapshot()
	require.Equal(t, []event.Type{event.AuditKeyCreated}, eventTypes(f.outbox()[0].Events), "the store records the creation's events")

	var (
		got   *apikey.Key
		dbNow time.Time
	)
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		got, dbNow, err = st.Keys.ByHash(ctx, apikey.Hash(token))
		if err != nil {
			return err
		}
		usable, err = st.Keys.Usable(ctx)
		return err
	})
	require.True(t, usable)
	require.Equal(t, want.ID, got.ID())
	v := got.Snapshot()
	require.Equal(t, want.Name, v.Name)
	require.Equal(t, want.Scopes, v.Scopes)
	require.Equal(t, want.Queues, v.Queues)
	require.Equal(t, "ci-", v.WorkerPrefix)
	require.Equal(t, apikey.Hash(token), v.Hash)
	require.WithinDuration(t, want.ExpiresAt.UTC(), v.ExpiresAt.UTC(), time.Microsecond)
	require.False(t, dbNow.IsZero())
	require.Nil(t, v.LastUsedAt)

	f.run(func(ctx context.Context, st ports.Stores) error {
		_, _, err := st.Keys.ByHash(ctx, apikey.Hash("tmk_other"))
		require.ErrorIs(t, err, apikey.ErrUnknown)
		return st.Keys.MarkUsed(ctx, []uuid.UUID{k.ID()})
	})
	var list []*apikey.Key
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		list, err = st.Keys.List(ctx)
		return err
	})
	require.Len(t, list, 1)
	require.NotNil(t, list[0].Snapshot().LastUsedAt, "MarkUsed stamps last_used_at")

	// Revocation saves revoked_at and records the events; a decision that
	// changes nothing saves nothing.
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Keys.Update(ctx, k.ID(), func(k *apikey.Key, now time.Time) ([]event.Event, bool, error) {
			return []event.Event{event.Audit(event.AuditKeyRevoked, "", now)}, k.Revoke(now), nil
		})
		return err
	})
	f.run(func(ctx context.Context, st ports.Stores) error {
		got, _, err := st.Keys.ByHash(ctx, apikey.Hash(token))
		require.NoError(t, err)
		require.ErrorIs(t, got.Check(time.Now()), apikey.ErrRevoked)
		usable, err = st.Keys.Usable(ctx)
		return err
	})
	require.False(t, usable, "a revoked key is not usable")
	require.Len(t, f.outbox(), 2)
	err := f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, err := st.Keys.Update(ctx, uuid.New(), nil)
		return err
	})
	require.ErrorIs(t, err, apikey.ErrNotFound)
}

// The key table holds digests only, and a token's digest is unique.
func TestKeyStoreKeepsNoToken(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	_, token := f.createKey(apikey.CreateParams{Name: "a", Scopes: []apikey.Scope{apikey.ScopeAdmin}})
	var dump string
	require.NoError(t, f.db.Get(&dump, `SELECT string_agg(t::text, ' ') FROM api_keys t`))
	require.NotContains(t, dump, token)
	require.NotContains(t, dump, token[len(apikey.TokenPrefix):])
	_, err := f.db.Exec(`INSERT INTO api_keys (id, name, hash, scopes, created_at) VALUES ($1, 'dup', $2, '{read}', now())`,
		uuid.New(), apikey.Hash(token))
	require.ErrorContains(t, err, "api_keys_hash")
}

func TestWorkerOwnerIsStored(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	owner := uuid.NewString()
	f.register(worker.RegisterParams{ID: "w1", Owner: owner})
	f.register(worker.RegisterParams{ID: "w2"})
	var owners map[string]string
	var loaded *worker.Worker
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		if loaded, err = st.Workers.Get(ctx, "w1"); err != nil {
			return err
		}
		owners, err = st.Workers.Owners(ctx, []string{"w1", "w2", "nobody"})
		return err
	})
	require.Equal(t, owner, loaded.Owner())
	require.Equal(t, map[string]string{"w1": owner}, owners, "workers without an owner, or missing, are absent")

	// Adoption by a later registration is saved.
	adopter := uuid.NewString()
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, _, err := st.Workers.Upsert(ctx, "w2", func(existing *worker.Worker, now time.Time) (*worker.Worker, []event.Event, error) {
			e, err := existing.Reregister(worker.RegisterParams{Owner: adopter}, now)
			return existing, []event.Event{e}, err
		})
		return err
	})
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		owners, err = st.Workers.Owners(ctx, []string{"w2"})
		return err
	})
	require.Equal(t, adopter, owners["w2"])
}

// A listing restricted to a key's queues returns the tasks of matching
// queues only: exact names and prefixes, "_" and "%" being plain
// characters.
func TestListVisibleQueues(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for _, q := range []string{"emails-eu", "emails-us", "emails", "sms", "a_b", "axb", "other"} {
		f.submit(task.SubmitParams{Queue: q})
	}
	list := func(visible []string) []string {
		var ts []*task.Task
		f.run(func(ctx context.Context, st ports.Stores) error {
			var err error
			ts, _, err = st.Bulk.Search(ctx, ports.BulkBatchParams{Limit: 100, Visible: visible}, 0)
			return err
		})
		var queues []string
		for _, t := range ts {
			queues = append(queues, t.Queue())
		}
		return queues
	}
	require.ElementsMatch(t, []string{"emails-eu", "emails-us", "sms"}, list([]string{"emails-*", "sms"}))
	require.ElementsMatch(t, []string{"a_b"}, list([]string{"a_*"}))
	require.Empty(t, list([]string{}), "an empty list matches nothing")
	require.Len(t, list(nil), 7, "nil: no restriction")
}
