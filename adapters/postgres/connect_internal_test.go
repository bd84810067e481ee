package postgres

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConnectTimeoutAddedUnlessTheURLSetsOne(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"postgres://u@h:5432/db?sslmode=disable": "5",
		"postgresql://u@h/db":                    "5",
		"postgres://u@h/db?connect_timeout=30":   "30",
	}
	for in, want := range cases {
		u, err := url.Parse(ConnConfig{}.DSN(in))
		require.NoError(t, err)
		require.Equal(t, want, u.Query().Get("connect_timeout"), in)
	}
	require.Equal(t, "host=h user=u dbname=db", ConnConfig{}.DSN("host=h user=u dbname=db"), "a key=value DSN is left as it is")
}

func TestWithParamKeepsTheURLsOwnSetting(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://u@h/db?application_name=taskmaster-notifier&connect_timeout=5",
		withParam("postgres://u@h/db?connect_timeout=5", "application_name", NotifierApplicationName))
	require.Equal(t, "postgres://u@h/db?application_name=mine",
		withParam("postgres://u@h/db?application_name=mine", "application_name", NotifierApplicationName))
}
