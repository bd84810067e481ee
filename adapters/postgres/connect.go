package postgres

import (
	"net/url"
	"strings"
	"time"
)

// DefaultConnectTimeout bounds establishing a connection (the TCP dial and
// the startup handshake) unless the database URL sets connect_timeout
// (ConnConfig.DSN adds it). Without
// it lib/pq waits as long as the operating system does (minutes for a host
// that does not answer), and a request that needs a new connection during an
// outage would wait as long.
const DefaultConnectTimeout = 5 * time.Second

// NotifierApplicationName is the application_name of the notifier's
// listening connection (unless the URL sets one): it names the session in
// pg_stat_activity.
const NotifierApplicationName = "taskmaster-notifier"

// withParam adds name=value to a postgres:// URL that does not set name (a
// key=value DSN is left as it is).
func withParam(dsn, name, value string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || strings.Contains(u.RawQuery, name) {
		return dsn
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}
