package sealer_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/sealer"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, sealer.KeySize) }

func TestSealAndOpen(t *testing.T) {
	t.Parallel()
	s, err := sealer.New([][]byte{key(1)})
	require.NoError(t, err)
	require.True(t, s.Sealing())
	sealed, err := s.Seal("tmpush_secret", "queue:a:push_secret")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sealed, "v1:"), sealed)
	require.NotContains(t, sealed, "tmpush_secret")
	again, err := s.Seal("tmpush_secret", "queue:a:push_secret")
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce each time")
	plain, err := s.Open(sealed, "queue:a:push_secret")
	require.NoError(t, err)
	require.Equal(t, "tmpush_secret", plain)

	_, err = s.Open(sealed, "queue:b:push_secret")
	require.Error(t, err, "a value moved to another queue does not open")
	tampered := sealed[:len(sealed)-2] + "AA"
	_, err = s.Open(tampered, "queue:a:push_secret")
	require.Error(t, err)
}

// A new key seals; the old one, listed after it, still opens what it
// sealed; a key no longer listed is named in the error.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	old, err := sealer.New([][]byte{key(1)})
	require.NoError(t, err)
	sealed, err := old.Seal("v", "aad")
	require.NoError(t, err)
	both, err := sealer.New([][]byte{key(2), key(1)})
	require.NoError(t, err)
	plain, err := both.Open(sealed, "aad")
	require.NoError(t, err)
	require.Equal(t, "v", plain)
	resealed, err := both.Seal(plain, "aad")
	require.NoError(t, err)
	only2, err := sealer.New([][]byte{key(2)})
	require.NoError(t, err)
	_, err = only2.Open(resealed, "aad")
	require.NoError(t, err)
	_, err = only2.Open(sealed, "aad")
	require.ErrorIs(t, err, sealer.ErrUnknownKey)
}

// Without keys values are stored marked as not sealed, and open under any
// configuration.
func TestWithoutKeysValuesAreMarkedUnsealed(t *testing.T) {
	t.Parallel()
	none, err := sealer.New(nil)
	require.NoError(t, err)
	require.False(t, none.Sealing())
	v, err := none.Seal("tmpush_x", "aad")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(v, "plain:"))
	keyed, err := sealer.New([][]byte{key(3)})
	require.NoError(t, err)
	plain, err := keyed.Open(v, "other")
	require.NoError(t, err)
	require.Equal(t, "tmpush_x", plain)
	_, err = keyed.Open("garbage", "aad")
	require.Error(t, err)
}

func TestParseKeys(t *testing.T) {
	t.Parallel()
	k1, k2 := key(7), key(8)
	keys, err := sealer.ParseKeys(base64.StdEncoding.EncodeToString(k1) + ", " + base64.RawURLEncoding.EncodeToString(k2))
	require.NoError(t, err)
	require.Equal(t, [][]byte{k1, k2}, keys)
	keys, err = sealer.ParseKeys("")
	require.NoError(t, err)
	require.Empty(t, keys)
	_, err = sealer.ParseKeys(base64.StdEncoding.EncodeToString(key(1)[:16]))
	require.ErrorContains(t, err, "key 1")
	_, err = sealer.ParseKeys("not base64!")
	require.Error(t, err)
}
