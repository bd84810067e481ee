package testserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/apikey"
)

// CreateKey makes an API key on the instance's database, as `taskmaster
// keys create` does there (the unrestricted principal), and returns its id
// and token.
func (s *Server) CreateKey(t testing.TB, p apikey.CreateParams) (id, token string) {
	t.Helper()
	return CreateKeyOn(t, s.DatabaseURL, p)
}

// CreateKeyOn makes an API key on the database at databaseURL.
func CreateKeyOn(t testing.TB, databaseURL string, p apikey.CreateParams) (id, token string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := postgres.Open(ctx, databaseURL, postgres.PoolConfig{MaxOpen: 1, MaxIdle: 1, Conn: postgres.DefaultConnConfig()})
	require.NoError(t, err)
	defer db.Close()
	if p.Name == "" {
		p.Name = "test"
	}
	k, token, err := application.NewKeyService(postgres.NewTxRunner(db), application.KeyConfig{}, nil).Create(ctx, p)
	require.NoError(t, err)
	return k.ID().String(), token
}

// AdminKey makes a key with the admin scope.
func (s *Server) AdminKey(t testing.TB) string {
	t.Helper()
	_, token := s.CreateKey(t, apikey.CreateParams{Name: "admin", Scopes: []apikey.Scope{apikey.ScopeAdmin}})
	return token
}
