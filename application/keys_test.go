package application_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

func createKey(t *testing.T, keys *application.KeyService, ctx context.Context, p apikey.CreateParams) (*apikey.Key, string) {
	t.Helper()
	k, token, err := keys.Create(ctx, p)
	require.NoError(t, err)
	require.NoError(t, apikey.CheckToken(token))
	return k, token
}

// auditEvents returns the audit events in the outbox, oldest first.
func auditEvents(t *testing.T, s services) []event.Event {
	t.Helper()
	var payloads [][]byte
	require.NoError(t, s.db.Select(&payloads, `SELECT payload FROM watermill_taskmaster_events ORDER BY "offset"`))
	var out []event.Event
	for _, p := range payloads {
		events, err := envelope.Decode(p)
		require.NoError(t, err)
		for _, e := range events {
			if strings.HasPrefix(string(e.Type), "audit.") {
				out = append(out, e)
			}
		}
	}
	return out
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	keys := application.NewKeyService(s.tx, application.KeyConfig{}, nil)
	admin, adminToken := createKey(t, keys, ctx, apikey.CreateParams{Name: "root", Scopes: []apikey.Scope{apikey.ScopeAdmin}})

	got, err := keys.Authenticate(ctx, adminToken)
	require.NoError(t, err)
	require.Equal(t, admin.ID(), got.ID())

	_, err = keys.Authenticate(ctx, "")
	require.ErrorIs(t, err, apikey.ErrMissing)
	_, err = keys.Authenticate(ctx, "tmk_nope")
	require.ErrorIs(t, err, apikey.ErrMalformedToken)
	other, err := apikey.NewToken()
	require.NoError(t, err)
	_, err = keys.Authenticate(ctx, other)
	require.ErrorIs(t, err, apikey.ErrUnknown)

	// Revocation is seen at once on the instance that revoked.
	asAdmin := ports.WithPrincipal(ctx, admin)
	worker, workerToken := createKey(t, keys, asAdmin, apikey.CreateParams{Name: "w", Scopes: []apikey.Scope{apikey.ScopeWork}})
	_, err = keys.Authenticate(ctx, workerToken)
	require.NoError(t, err)
	revoked, err := keys.Revoke(asAdmin, worker.ID())
	require.NoError(t, err)
	require.NotNil(t, revoked.Snapshot().RevokedAt)
	_, err = keys.Authenticate(ctx, workerToken)
	require.ErrorIs(t, err, apikey.ErrRevoked)
	again, err := keys.Revoke(asAdmin, worker.ID())
	require.NoError(t, err, "revoking twice is not an error")
	require.Equal(t, revoked.Snapshot().RevokedAt, again.Snapshot().RevokedAt)

	// Expiry is judged on the database clock.
	expiring, expiringToken := createKey(t, keys, ctx, apikey.CreateParams{Name: "e", Scopes: []apikey.Scope{apikey.ScopeRead}, ExpiresIn: time.Hour})
	_, err = s.db.Exec(`UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, expiring.ID())
	require.NoError(t, err)
	fresh := application.NewKeyService(s.tx, application.KeyConfig{}, nil) // another instance: nothing cached
	_, err = fresh.Authenticate(ctx, expiringToken)
	require.ErrorIs(t, err, apikey.ErrExpired)

	// Creation and the first revocation are audited with the acting key.
	var audits []event.Event
	for _, e := range auditEvents(t, s) {
		audits = append(audits, event.Event{Type: e.Type, KeyID: e.KeyID, TargetKeyID: e.TargetKeyID})
	}
	require.Equal(t, []event.Event{
		{Type: event.AuditKeyCreated, TargetKeyID: admin.ID().String()},
		{Type: event.AuditKeyCreated, KeyID: admin.ID().String(), TargetKeyID: worker.ID().String()},
		{Type: event.AuditKeyRevoked, KeyID: admin.ID().String(), TargetKeyID: worker.ID().String()},
		{Type: event.AuditKeyCreated, TargetKeyID: expiring.ID().String()},
	}, audits)

	_, _, err = keys.Create(ctx, apikey.CreateParams{Name: "", Scopes: []apikey.Scope{"root"}})
	var v *validation.Error
	require.ErrorAs(t, err, &v)
	require.Len(t, v.Fields, 2)
}

// An instance trusts a lookup for CacheTTL at most: a key revoked through
// another instance is refused here once that time has passed.
func TestRevocationReachesOtherInstancesWithinTheCacheLifetime(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	const ttl = 100 * time.Millisecond
	here := application.NewKeyService(s.tx, application.KeyConfig{CacheTTL: ttl}, nil)
	there := application.NewKeyService(s.tx, application.KeyConfig{CacheTTL: ttl}, nil)
	k, token := createKey(t, there, ctx, apikey.CreateParams{Name: "w", Scopes: []apikey.Scope{apikey.ScopeWork}})
	_, err := here.Authenticate(ctx, token)
	require.NoError(t, err, "cached here from now on")

	_, err = there.Revoke(ctx, k.ID())
	require.NoError(t, err)
	revokedAt := time.Now()
	time.Sleep(ttl) // the bound under test, not a synchronisation
	_, err = here.Authenticate(ctx, token)
	require.ErrorIs(t, err, apikey.ErrRevoked, "refused %s after the revocation", time.Since(revokedAt))
}

// countingTx counts the transactions run through it.
type countingTx struct {
	ports.TxRunner
	runs atomic.Int64
}

func (c *countingTx) Run(ctx context.Context, fn func(ctx context.Context, st ports.Stores) error) error {
	c.runs.Add(1)
	return c.TxRunner.Run(ctx, fn)
}

// Concurrent requests with one token share one lookup, and later ones use
// it while it is fresh.
func TestAuthenticateSharesLookups(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	tx := &countingTx{TxRunner: s.tx}
	keys := application.NewKeyService(tx, application.KeyConfig{CacheTTL: time.Second}, nil)
	_, token := createKey(t, keys, ctx, apikey.CreateParams{Name: "w", Scopes: []apikey.Scope{apikey.ScopeWork}})
	before := tx.runs.Load()
	start := time.Now()
	errs := make(chan error, 50)
	for range 50 {
		go func() {
			_, err := keys.Authenticate(ctx, token)
			errs <- err
		}()
	}
	for range 50 {
		require.NoError(t, <-errs)
	}
	lookups := tx.runs.Load() - before
	if time.Since(start) < time.Second { // a slow machine may outlive one lookup
		require.Equal(t, int64(1), lookups, "50 authentications within the cache lifetime look the key up once")
	}
	require.GreaterOrEqual(t, lookups, int64(1))
}

// last_used_at is saved by the running service, off the requests' path.
func TestKeyUsageIsSavedInTheBackground(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	keys := application.NewKeyService(s.tx, application.KeyConfig{UsageInterval: 20 * time.Millisecond}, nil)
	k, token := createKey(t, keys, ctx, apikey.CreateParams{Name: "w", Scopes: []apikey.Scope{apikey.ScopeWork}})
	require.NoError(t, keys.Start(ctx))
	t.Cleanup(func() { _ = keys.Stop(context.Background()) })
	_, err := keys.Authenticate(ctx, token)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var used *time.Time
		require.NoError(t, s.db.Get(&used, `SELECT last_used_at FROM api_keys WHERE id = $1`, k.ID()))
		if used != nil {
			break
		}
		require.False(t, time.Now().After(deadline), "last_used_at was never saved")
		time.Sleep(10 * time.Millisecond)
	}

	// Stop saves what the last interval saw.
	stopped := application.NewKeyService(s.tx, application.KeyConfig{UsageInterval: time.Hour}, nil)
	k2, token2 := createKey(t, stopped, ctx, apikey.CreateParams{Name: "w2", Scopes: []apikey.Scope{apikey.ScopeWork}})
	require.NoError(t, stopped.Start(ctx))
	_, err = stopped.Authenticate(ctx, token2)
	require.NoError(t, err)
	require.NoError(t, stopped.Stop(ctx))
	var used *time.Time
	require.NoError(t, s.db.Get(&used, `SELECT last_used_at FROM api_keys WHERE id = $1`, k2.ID()))
	require.NotNil(t, used)
}

// Lookups of tokens that name no key never crowd a key in use out of the
// cache: with room for two lookups, twenty unknown tokens later the
// working key's lookup is still there (Known), and it is looked up no more
// while fresh. The unknown ones replace each other.
func TestUnknownTokensNeverEvictAKeyInUse(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	tx := &countingTx{TxRunner: s.tx}
	keys := application.NewKeyService(tx, application.KeyConfig{CacheTTL: time.Second, CacheSize: 2}, nil)
	_, token := createKey(t, keys, ctx, apikey.CreateParams{Name: "w", Scopes: []apikey.Scope{apikey.ScopeWork}})
	require.False(t, keys.Known(token), "not looked up yet")
	looked := time.Now()
	_, err := keys.Authenticate(ctx, token)
	require.NoError(t, err)
	require.True(t, keys.Known(token))
	for range 20 {
		random, err := apikey.NewToken()
		require.NoError(t, err)
		_, err = keys.Authenticate(ctx, random)
		require.ErrorIs(t, err, apikey.ErrUnknown)
		require.False(t, keys.Known(random))
		require.True(t, keys.Known(token), "the key in use is still remembered")
	}
	before := tx.runs.Load()
	_, err = keys.Authenticate(ctx, token)
	require.NoError(t, err)
	if time.Since(looked) < 900*time.Millisecond { // a slow machine may outlive the lookup
		require.Equal(t, before, tx.runs.Load())
	}
	require.False(t, keys.Known("not-a-key"))
}
