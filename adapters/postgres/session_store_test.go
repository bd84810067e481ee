package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/apikey"
)

// A session works while it and its key do: logout, the key's revocation and
// the session's expiry each end it; a write key cannot open one.
func TestSessionsLiveWithTheirKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	tx := postgres.NewTxRunner(db)
	keys := application.NewKeyService(tx, application.KeyConfig{CacheTTL: time.Millisecond}, nil)
	sessions := application.NewSessionService(tx, keys, application.SessionConfig{CacheTTL: time.Millisecond})

	k, token, err := keys.Create(ctx, apikey.CreateParams{Name: "viewer", Scopes: []apikey.Scope{apikey.ScopeRead}})
	require.NoError(t, err)
	st, s, got, err := sessions.Login(ctx, token)
	require.NoError(t, err)
	require.True(t, apikey.WellFormedSession(st))
	require.Equal(t, k.ID(), got.ID())
	require.NotEmpty(t, s.CSRF)

	again, key, err := sessions.Authenticate(ctx, st)
	require.NoError(t, err)
	require.Equal(t, s.ID, again.ID)
	require.Equal(t, k.ID(), key.ID())
	var stored []byte
	require.NoError(t, db.Get(&stored, `SELECT hash FROM `+postgres.SessionsTable+` WHERE id = $1`, s.ID))
	require.Equal(t, apikey.SessionHash(st), stored, "only the token's digest is stored")

	// Another last character (one in 64 tokens ends in "A" already).
	last := "A"
	if st[len(st)-1] == 'A' {
		last = "B"
	}
	_, _, err = sessions.Authenticate(ctx, "tms_"+st[4:len(st)-1]+last)
	require.ErrorIs(t, err, apikey.ErrSessionUnknown)

	// Logout ends it.
	require.NoError(t, sessions.Logout(ctx, st))
	_, _, err = sessions.Authenticate(ctx, st)
	require.ErrorIs(t, err, apikey.ErrSessionUnknown)

	// Revoking the key ends its sessions.
	st2, _, _, err := sessions.Login(ctx, token)
	require.NoError(t, err)
	_, err = keys.Revoke(ctx, k.ID())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, _, err := sessions.Authenticate(ctx, st2)
		return err != nil
	}, 5*time.Second, 10*time.Millisecond)

	// A session past its expiry is refused (and a login cleans it up).
	_, admin, err := keys.Create(ctx, apikey.CreateParams{Name: "admin", Scopes: []apikey.Scope{apikey.ScopeAdmin}})
	require.NoError(t, err)
	st3, s3, _, err := sessions.Login(ctx, admin)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE `+postgres.SessionsTable+` SET expires_at = now() - interval '1 second' WHERE id = $1`, s3.ID)
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // the lookup cache's millisecond
	_, _, err = sessions.Authenticate(ctx, st3)
	require.ErrorIs(t, err, apikey.ErrSessionExpired)
	_, _, _, err = sessions.Login(ctx, admin)
	require.NoError(t, err)
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM `+postgres.SessionsTable+` WHERE id = $1`, s3.ID))
	require.Zero(t, n, "a login deletes expired sessions")

	// A key without read or admin cannot use the dashboard.
	_, worker, err := keys.Create(ctx, apikey.CreateParams{Name: "worker", Scopes: []apikey.Scope{apikey.ScopeWork}})
	require.NoError(t, err)
	_, _, _, err = sessions.Login(ctx, worker)
	var fe *apikey.ForbiddenError
	require.ErrorAs(t, err, &fe)
}
