package application_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/apikey"
)

// BenchmarkAuthenticate is what authentication costs a request whose key
// was looked up less than the cache's lifetime ago (checksum, digest, cache,
// expiry): every request but one per key per 500 ms per instance.
func BenchmarkAuthenticate(b *testing.B) {
	s := setupTB(b)
	keys := application.NewKeyService(s.tx, application.KeyConfig{CacheTTL: application.MaxKeyCacheTTL}, nil)
	_, token, err := keys.Create(b.Context(), apikey.CreateParams{Name: "bench", Scopes: []apikey.Scope{apikey.ScopeWork}})
	require.NoError(b, err)
	_, err = keys.Authenticate(b.Context(), token)
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := keys.Authenticate(b.Context(), token); err != nil {
			b.Fatal(err)
		}
	}
}
