// Package security_test runs the real `taskmaster` binary to check what only
// a process shows: authentication's default by address, the warnings and
// the first-key command `serve` logs, the first key made with `taskmaster
// keys create` on the database, the metrics listener, and TLS with its
// certificate reloaded on SIGHUP.
package security_test

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/binary"
	"github.com/taskmaster/taskmaster/tests/tlstest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// waitFor bounds every wait, far above what any needs.
const waitFor = 30 * time.Second

func get(t *testing.T, url, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// logged waits for a log line with msg and returns it.
func logged(t *testing.T, p *binary.Process, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if entries := p.Logged(msg); len(entries) > 0 {
			return entries[0]
		}
		require.False(t, time.Now().After(deadline), "no log line %q in:\n%s", msg, p.Output())
		time.Sleep(20 * time.Millisecond)
	}
}

// Authentication is off by default on a loopback address (`make run`), on
// elsewhere. With it on and no key, everything but the probes is 401 and
// serve logs the command that makes the first key; that command, run on the
// database, makes a key the server takes. Off on a reachable address, serve
// warns at every start.
func TestAuthDefaultsAndTheFirstKey(t *testing.T) {
	t.Parallel()
	bin := binary.Build(t)
	db := pgtest.NewDatabase(t)

	local := binary.Serve(t, bin, "TASKMASTER_DATABASE_URL="+db)
	require.Equal(t, http.StatusOK, get(t, local.URL+"/queues/v1", ""), "off on loopback")
	logged(t, local, "authentication is off (loopback address); TASKMASTER_AUTH=on turns it on")
	local.Stop(t)

	open := binary.Serve(t, bin, "TASKMASTER_DATABASE_URL="+db, "TASKMASTER_HTTP_ADDR=0.0.0.0:0")
	require.Equal(t, http.StatusUnauthorized, get(t, open.URL+"/queues/v1", ""), "on elsewhere")
	require.Equal(t, http.StatusOK, get(t, open.URL+"/healthz", ""))
	require.Equal(t, http.StatusOK, get(t, open.URL+"/readyz", ""))
	first := logged(t, open, "authentication is on and no usable API key exists: every request but /healthz and /readyz "+
		"is refused with 401; create the first admin key with this server's TASKMASTER_DATABASE_URL")
	require.Equal(t, app.FirstKeyCommand, first["command"])

	args := append(strings.Fields(app.FirstKeyCommand)[1:], "--json")
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"TASKMASTER_DATABASE_URL=" + db}
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var key struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal(out, &key), "%s", out)
	require.Equal(t, http.StatusOK, get(t, open.URL+"/queues/v1", key.Key), "the first key works at once")
	open.Stop(t)

	// Off on a reachable address: it warns, and answers only requests to a
	// loopback name (a page on another name, even one that resolves to
	// this host, gets nothing).
	exposed := binary.Serve(t, bin, "TASKMASTER_DATABASE_URL="+db, "TASKMASTER_HTTP_ADDR=0.0.0.0:0", "TASKMASTER_AUTH=off")
	u, err := url.Parse(exposed.URL)
	require.NoError(t, err)
	loopback := "http://127.0.0.1:" + u.Port()
	require.Equal(t, http.StatusOK, get(t, loopback+"/queues/v1", ""))
	for path, want := range map[string]int{"/queues/v1": http.StatusForbidden, "/ui/": http.StatusForbidden, "/healthz": http.StatusOK} {
		req, err := http.NewRequest(http.MethodGet, loopback+path, nil)
		require.NoError(t, err)
		req.Host = "taskmaster.example:" + u.Port() // a name that resolves here, not a loopback name
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, want, resp.StatusCode, "%s by another name", path)
	}
	warning := logged(t, exposed, "authentication is off on an address other hosts can reach: anyone who reaches it can submit, "+
		"complete, cancel and read every task; set TASKMASTER_AUTH=on")
	require.Equal(t, "warn", warning["level"])
}

// HTTPS with the configured certificate; after the files are renewed,
// SIGHUP makes every new connection get the new certificate, without a
// restart; an expired certificate is refused and the one in use kept. TASKMASTER_METRICS_ADDR serves metrics without a key, while the
// API wants one.
func TestTLSReloadOnSIGHUPAndTheMetricsListener(t *testing.T) {
	t.Parallel()
	bin := binary.Build(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := tlstest.NewCA(t)
	ca.Issue(t, 1001, certFile, keyFile)
	db := pgtest.NewDatabase(t)
	p := binary.Serve(t, bin, "TASKMASTER_DATABASE_URL="+db, "TASKMASTER_AUTH=on",
		"TASKMASTER_TLS_CERT_FILE="+certFile, "TASKMASTER_TLS_KEY_FILE="+keyFile,
		"TASKMASTER_METRICS_ADDR=127.0.0.1:0")
	require.True(t, strings.HasPrefix(p.URL, "https://"))
	require.Equal(t, int64(1001), ca.Serial(t, p.URL+"/healthz"))

	ca.Issue(t, 1002, certFile, keyFile)
	p.Signal(t, syscall.SIGHUP)
	logged(t, p, "SIGHUP: TLS certificate reloaded")
	require.Equal(t, int64(1002), ca.Serial(t, p.URL+"/healthz"))

	// An expired certificate is refused, loudly, and the one in use stays.
	ca.IssueValid(t, 1003, certFile, keyFile, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Minute))
	p.Signal(t, syscall.SIGHUP)
	refused := logged(t, p, "SIGHUP: TLS certificate not reloaded; the previous one stays in use")
	require.Contains(t, refused["error"], "expired")
	require.Len(t, p.Logged("SIGHUP: TLS certificate reloaded"), 1)
	require.Equal(t, int64(1002), ca.Serial(t, p.URL+"/healthz"))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: waitFor}).Get(p.URL + "/metrics")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the API serves metrics to read keys only")

	metrics := logged(t, p, "metrics listening")
	addr, ok := metrics["addr"].(string)
	require.True(t, ok, "%v", metrics)
	require.Equal(t, http.StatusOK, get(t, "http://"+addr+"/metrics", ""))
	require.Equal(t, http.StatusOK, get(t, "http://"+addr+"/actuator/prometheus", ""))
	require.Equal(t, http.StatusNotFound, get(t, "http://"+addr+"/queues/v1", ""), "the metrics listener serves metrics only")
}
