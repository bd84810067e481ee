package postgres_test

import (
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
)

// TestParseConnStringMirrorsLibpq checks one libpq rule per row
// (src/interfaces/libpq/fe-connect.c, PostgreSQL 15), and that lib/pq reads
// the key=value string each becomes as the same hosts and ports.
func TestParseConnStringMirrorsLibpq(t *testing.T) {
	t.Parallel()
	type P = postgres.ConnParams
	cases := []struct {
		rule string
		in   string
		want P
	}{
		// conninfo_uri_parse_options
		{"both URI designators", "postgresql://h/db", P{"host": "h", "dbname": "db"}},
		{"the short designator", "postgres://h/db", P{"host": "h", "dbname": "db"}},
		{"nothing after the designator: every default", "postgres://", P{}},
		{"user and password before @", "postgres://u:secret@h:5433/db", P{"user": "u", "password": "secret", "host": "h", "port": "5433", "dbname": "db"}},
		{"only the first colon separates the password", "postgres://u:a:b@h/db", P{"user": "u", "password": "a:b", "host": "h", "dbname": "db"}},
		{"the first @ ends the credentials", "postgres://u:p@ss@h/db", P{"user": "u", "password": "p", "host": "ss@h", "dbname": "db"}},
		{"an @ after the first / is no credential", "postgres://h/d@b", P{"host": "h", "dbname": "d@b"}},
		{"an empty user is not set", "postgres://:p@h/db", P{"password": "p", "host": "h", "dbname": "db"}},
		{"credentials are percent-decoded", "postgres://us%40er:p%2Fw@h/db", P{"user": "us@er", "password": "p/w", "host": "h", "dbname": "db"}},
		{"several hosts, each with its port", "postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write",
			P{"user": "u", "host": "h1,h2", "port": "5432,5433", "dbname": "db", "target_session_attrs": "read-write"}},
		{"a host without a port after one with a port gets the default", "postgres://h1:5433,h2/db", P{"host": "h1,h2", "port": "5433,5432", "dbname": "db"}},
		{"a host without a port before one with a port gets the default", "postgres://h1,h2:5433/db", P{"host": "h1,h2", "port": "5432,5433", "dbname": "db"}},
		{"several hosts without ports: no port list", "postgres://h1,h2,h3/db", P{"host": "h1,h2,h3", "dbname": "db"}},
		{"an IPv6 address in brackets", "postgres://[::1]:5433/db", P{"host": "::1", "port": "5433", "dbname": "db"}},
		{"IPv6 addresses in a host list", "postgres://[2001:db8::1],[::1]:5433/db", P{"host": "2001:db8::1,::1", "port": "5432,5433", "dbname": "db"}},
		{"a percent-encoded host is a socket directory", "postgres://%2Fvar%2Frun%2Fpostgresql/db", P{"host": "/var/run/postgresql", "dbname": "db"}},
		{"the database is percent-decoded", "postgres://h/my%20db", P{"host": "h", "dbname": "my db"}},
		{"an empty path sets no database", "postgres://h/?sslmode=disable", P{"host": "h", "sslmode": "disable"}},
		{"a query right after the host", "postgres://h?dbname=db", P{"host": "h", "dbname": "db"}},
		{"an empty port is no port", "postgres://h:/db", P{"host": "h", "dbname": "db"}},
		// conninfo_uri_parse_params
		{"query parameters are percent-decoded", "postgres://h/db?application_name=a%26b&options=-c%20x%3D1", P{"host": "h", "dbname": "db", "application_name": "a&b", "options": "-c x=1"}},
		{"a plus is a plus, not a space", "postgres://h/db?application_name=a+b", P{"host": "h", "dbname": "db", "application_name": "a+b"}},
		{"a query parameter replaces the netloc's", "postgres://h1:1/db?host=h2&port=2", P{"host": "h2", "port": "2", "dbname": "db"}},
		{"the host list may come from the query", "postgres:///db?host=h1,h2&port=5432,5433", P{"host": "h1,h2", "port": "5432,5433", "dbname": "db"}},
		{"a socket directory may come from the query", "postgres:///db?host=/var/lib/postgresql", P{"host": "/var/lib/postgresql", "dbname": "db"}},
		{"a later parameter replaces an earlier one", "postgres://h/db?sslmode=disable&sslmode=require", P{"host": "h", "dbname": "db", "sslmode": "require"}},
		{"ssl=true is sslmode=require (JDBC)", "postgres://h/db?ssl=true", P{"host": "h", "dbname": "db", "sslmode": "require"}},
		{"an empty value", "postgres://h/db?application_name=", P{"host": "h", "dbname": "db", "application_name": ""}},
		{"connect_timeout is kept for each host", "postgres://h1,h2/db?connect_timeout=2", P{"host": "h1,h2", "dbname": "db", "connect_timeout": "2"}},
		// conninfo_parse (key=value)
		{"key=value pairs", "host=h port=5433 dbname=db user=u", P{"host": "h", "port": "5433", "dbname": "db", "user": "u"}},
		{"spaces around =", "host = h  dbname =db", P{"host": "h", "dbname": "db"}},
		{"a quoted value keeps its spaces", "host=h application_name='my app'", P{"host": "h", "application_name": "my app"}},
		{"quotes and backslashes escaped in a quoted value", `host=h password='it\'s a \\ test'`, P{"host": "h", "password": `it's a \ test`}},
		{"a backslash escapes in an unquoted value", `host=h password=a\ b`, P{"host": "h", "password": "a b"}},
		{"an empty quoted value", "host=h password=''", P{"host": "h", "password": ""}},
		{"several hosts and ports", "host=h1,h2 port=5432,5433 target_session_attrs=read-write", P{"host": "h1,h2", "port": "5432,5433", "target_session_attrs": "read-write"}},
		{"an empty item of a port list is the default port", "host=h1,h2 port=,5433", P{"host": "h1,h2", "port": "5432,5433"}},
		{"an empty string is every default", "", P{}},
		// lib/pq's extension, kept: unknown keywords are run-time parameters.
		{"an unknown keyword is a run-time parameter", "postgres://h/db?statement_timeout=5000", P{"host": "h", "dbname": "db", "statement_timeout": "5000"}},
	}
	for _, c := range cases {
		got, err := postgres.ParseConnString(c.in)
		require.NoError(t, err, c.rule)
		require.Equal(t, c.want, got, "%s: %s", c.rule, c.in)

		// The key=value form reads back the same, and lib/pq takes it.
		again, err := postgres.ParseConnString(got.String())
		require.NoError(t, err, c.rule)
		require.Equal(t, got, again, "%s: %s", c.rule, got.String())
		cfg, err := pq.NewConfig(got.String())
		require.NoError(t, err, "%s: lib/pq refused %s", c.rule, got.String())
		hosts := []string{cfg.Host}
		for _, m := range cfg.Multi {
			hosts = append(hosts, m.Host)
		}
		if h, ok := got["host"]; ok && h != "" {
			require.Len(t, hosts, len(got.Hosts()), "%s: lib/pq sees every host", c.rule)
		}
	}
}

func TestParseConnStringRefusesWhatLibpqRefuses(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"an unterminated IPv6 address":            "postgres://[::1/db",
		"an empty IPv6 address":                   "postgres://[]/db",
		"a character after an IPv6 address":       "postgres://[::1]x/db",
		"a query parameter without =":             "postgres://h/db?sslmode",
		"a query parameter with two =":            "postgres://h/db?a=b=c",
		"an empty query parameter between &":      "postgres://h/db?a=b&&c=d",
		"a truncated percent-encoding":            "postgres://h/db%2",
		"a percent-encoding that is not hex":      "postgres://h/db%zz",
		"a percent-encoded NUL":                   "postgres://u%00@h/db",
		"a key without =":                         "host",
		"a key without a value's =":               "host=h dbname",
		"an unterminated quoted value":            "host='h",
		"a quoted value ending in a backslash":    `host='h\`,
		"a value without a key":                   "=h",
		"a URL of another scheme is no key=value": "mysql://h/db",
	}
	for rule, in := range cases {
		_, err := postgres.ParseConnString(in)
		require.Error(t, err, "%s: %s", rule, in)
	}
}

func TestConnParamsHosts(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"postgres://h1:5433,h2/db":           {"h1:5433", "h2:5432"},
		"host=h1,h2 port=6432":               {"h1:6432", "h2:6432"},
		"postgres://u:secret@/db":            {"localhost:5432"},
		"postgres://[::1]:5433,h2:5434/db":   {"[::1]:5433", "h2:5434"},
		"host=/var/run/postgresql port=5433": {"/var/run/postgresql:5433"},
	} {
		p, err := postgres.ParseConnString(in)
		require.NoError(t, err)
		require.Equal(t, want, p.Hosts(), in)
	}
}
