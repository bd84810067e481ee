package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConnectTimeoutAddedUnlessTheURLSetsOne(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"postgres://u@h:5432/db?sslmode=disable":                  "postgres://u@h:5432/db?connect_timeout=5&sslmode=disable",
		"postgresql://u@h/db":                                     "postgresql://u@h/db?connect_timeout=5",
		"postgres://u@h/db?connect_timeout=30":                    "postgres://u@h/db?connect_timeout=30",
		"host=h user=u dbname=db":                                 "host=h user=u dbname=db",
		"postgres://u@h/db?sslmode=disable&binary_parameters=yes": "postgres://u@h/db?binary_parameters=yes&connect_timeout=5&sslmode=disable",
	}
	for in, want := range cases {
		require.Equal(t, want, withConnectTimeout(in), in)
	}
}

func TestWithParamKeepsTheURLsOwnSetting(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://u@h/db?application_name=taskmaster-notifier&connect_timeout=5",
		withParam(withConnectTimeout("postgres://u@h/db"), "application_name", NotifierApplicationName))
	require.Equal(t, "postgres://u@h/db?application_name=mine",
		withParam("postgres://u@h/db?application_name=mine", "application_name", NotifierApplicationName))
}
