package postgres

import (
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

// withParam adds name=value to a connection string (either form) that does
// not set name, and returns it in the key=value form.
func withParam(dsn, name, value string) (string, error) {
	p, err := ParseConnString(dsn)
	if err != nil {
		return "", err
	}
	if _, set := p[name]; !set {
		p[name] = value
	}
	return p.String(), nil
}
