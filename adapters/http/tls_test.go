package http

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/tlstest"
)

// tlsFixture is a server serving HTTPS with a certificate of serial 100
// from certFile and keyFile, issued by ca.
type tlsFixture struct {
	ca                *tlstest.CA
	cfg               ServerConfig
	srv               *Server
	certFile, keyFile string
	// served is the serial of the certificate a new connection gets.
	served func() int64
}

func startTLS(t *testing.T) tlsFixture {
	t.Helper()
	dir := t.TempDir()
	f := tlsFixture{ca: tlstest.NewCA(t), certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
	f.ca.Issue(t, 100, f.certFile, f.keyFile)
	f.cfg = DefaultServerConfig()
	f.cfg.Addr = "127.0.0.1:0"
	f.cfg.TLS = TLSConfig{CertFile: f.certFile, KeyFile: f.keyFile}
	f.srv = NewServer(f.cfg, Deps{})
	require.NoError(t, f.srv.Start(context.Background()))
	t.Cleanup(func() { _ = f.srv.Stop(context.Background()) })
	f.served = func() int64 { return f.ca.Serial(t, "https://"+f.srv.Addr()+"/healthz") }
	return f
}

// The server serves HTTPS with the configured certificate and, after
// ReloadTLS, the files' new one on every new connection; a reload of broken
// files fails and keeps the certificate in use.
func TestTLSServesAndReloadsTheCertificate(t *testing.T) {
	t.Parallel()
	f := startTLS(t)
	ca, srv, certFile, keyFile, served := f.ca, f.srv, f.certFile, f.keyFile, f.served
	require.Equal(t, int64(100), served())

	plain, err := http.Get("http://" + srv.Addr() + "/healthz")
	if err == nil {
		_ = plain.Body.Close()
		require.Equal(t, http.StatusBadRequest, plain.StatusCode, "plain HTTP is not served")
	}

	ca.Issue(t, 200, certFile, keyFile) // renewed in place
	require.Equal(t, int64(100), served(), "nothing changes before the reload")
	require.NoError(t, srv.ReloadTLS())
	require.Equal(t, int64(200), served())

	require.NoError(t, os.WriteFile(keyFile, []byte("not a key"), 0o600))
	require.Error(t, srv.ReloadTLS())
	require.Equal(t, int64(200), served(), "a failed reload keeps the certificate in use")

	plainSrv := NewServer(DefaultServerConfig(), Deps{})
	require.ErrorContains(t, plainSrv.ReloadTLS(), "does not serve TLS")
}

// A reload refuses a certificate that cannot serve, and keeps the one in
// use: an expired one, one not valid yet, and one whose key is not its
// own (every handshake would fail with any of them). So does a start.
func TestTLSReloadRefusesACertificateThatCannotServe(t *testing.T) {
	t.Parallel()
	f := startTLS(t)
	ca, srv, certFile, keyFile, served, dir := f.ca, f.srv, f.certFile, f.keyFile, f.served, filepath.Dir(f.certFile)

	now := time.Now()
	otherCert, otherKey := filepath.Join(dir, "other.crt"), filepath.Join(dir, "other.key")
	ca.Issue(t, 300, otherCert, otherKey)
	for _, c := range []struct {
		name  string
		issue func()
		says  string
	}{
		{"expired", func() { ca.IssueValid(t, 201, certFile, keyFile, now.Add(-2*time.Hour), now.Add(-time.Minute)) }, "expired"},
		{"not valid yet", func() { ca.IssueValid(t, 202, certFile, keyFile, now.Add(time.Hour), now.Add(2*time.Hour)) }, "not valid before"},
		{"mismatched key", func() {
			ca.Issue(t, 203, certFile, keyFile)
			key, err := os.ReadFile(otherKey)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(keyFile, key, 0o600))
		}, "does not match"},
	} {
		c.issue()
		err := srv.ReloadTLS()
		require.Error(t, err, c.name)
		require.ErrorContains(t, err, c.says, c.name)
		require.Equal(t, int64(100), served(), "%s: the certificate in use stays", c.name)
	}
	ca.Issue(t, 204, certFile, keyFile)
	require.NoError(t, srv.ReloadTLS())
	require.Equal(t, int64(204), served())

	ca.IssueValid(t, 205, certFile, keyFile, now.Add(-2*time.Hour), now.Add(-time.Minute))
	expired := NewServer(f.cfg, Deps{})
	require.ErrorContains(t, expired.Start(context.Background()), "expired")
}
