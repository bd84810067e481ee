package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDSNAddsTheDefaultsUnlessTheStringSetsThem(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, timeout, target string
	}{
		{"postgres://u@h:5432/db?sslmode=disable", "5", "read-write"},
		{"postgresql://u@h/db", "5", "read-write"},
		{"postgres://u@h/db?connect_timeout=30", "30", "read-write"},
		{"postgres://u@h1:5432,h2:5433/db?target_session_attrs=any", "5", "any"},
		{"host=h user=u dbname=db", "5", "read-write"},
		{"host=h1,h2 dbname=db connect_timeout=2 target_session_attrs=primary", "2", "primary"},
	}
	for _, c := range cases {
		dsn, err := DefaultConnConfig().DSN(c.in)
		require.NoError(t, err)
		p, err := ParseConnString(dsn)
		require.NoError(t, err)
		require.Equal(t, c.timeout, p["connect_timeout"], c.in)
		require.Equal(t, c.target, p["target_session_attrs"], c.in)
		require.Equal(t, "yes", p["binary_parameters"], c.in)
		require.Equal(t, "30000", p["statement_timeout"], c.in)
	}
	dsn, err := ConnConfig{}.DSN("postgres://u@h/db")
	require.NoError(t, err)
	p, err := ParseConnString(dsn)
	require.NoError(t, err)
	require.NotContains(t, p, "target_session_attrs", "without a target, lib/pq's default")
	require.NotContains(t, p, "statement_timeout", "zero bounds send nothing")

	_, err = DefaultConnConfig().DSN("postgres://h/db?sslmode")
	require.Error(t, err)
}

func TestWithParamKeepsTheStringsOwnSetting(t *testing.T) {
	t.Parallel()
	got, err := withParam("postgres://u@h/db?connect_timeout=5", "application_name", NotifierApplicationName)
	require.NoError(t, err)
	require.Equal(t, "application_name='taskmaster-notifier' connect_timeout='5' dbname='db' host='h' user='u'", got)
	got, err = withParam("host=h application_name=mine", "application_name", NotifierApplicationName)
	require.NoError(t, err)
	require.Equal(t, "application_name='mine' host='h'", got)
}
