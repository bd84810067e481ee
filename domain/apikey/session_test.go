package apikey_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/apikey"
)

func TestSessionSecrets(t *testing.T) {
	t.Parallel()
	token, csrf, err := apikey.NewSessionSecrets()
	require.NoError(t, err)
	require.True(t, apikey.WellFormedSession(token))
	require.False(t, apikey.WellFormedSession(csrf), "the CSRF token is not a session token")
	require.False(t, apikey.WellFormedSession(strings.TrimPrefix(token, apikey.SessionPrefix)))
	require.False(t, apikey.WellFormedSession(token+"A"))
	require.False(t, apikey.WellFormedSession("tmk_"+token[4:]), "an API key is not a session")
	other, _, err := apikey.NewSessionSecrets()
	require.NoError(t, err)
	require.NotEqual(t, token, other)
	require.Len(t, apikey.SessionHash(token), 32)
	require.NotEqual(t, apikey.SessionHash(token), apikey.SessionHash(other))
}

func TestSessionChecks(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := &apikey.Session{CSRF: "abc", ExpiresAt: now}
	require.NoError(t, s.Check(now.Add(-time.Nanosecond)))
	require.ErrorIs(t, s.Check(now), apikey.ErrSessionExpired)
	require.True(t, s.CheckCSRF("abc"))
	for _, bad := range []string{"", "ab", "abcd", "ABC"} {
		require.False(t, s.CheckCSRF(bad), bad)
	}
	require.False(t, (&apikey.Session{}).CheckCSRF(""), "an empty token never matches")
}
