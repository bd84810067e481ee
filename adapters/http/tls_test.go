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

// The server serves HTTPS with the configured certificate and, after
// ReloadTLS, the files' new one on every new connection; a reload of broken
// files fails and keeps the certificate in use.
func TestTLSServesAndReloadsTheCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := tlstest.NewCA(t)
	ca.Issue(t, 100, certFile, keyFile)

	cfg := DefaultServerConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.TLS = TLSConfig{CertFile: certFile, KeyFile: keyFile}
	srv := NewServer(cfg, Deps{})
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })

	served := func() int64 { return ca.Serial(t, "https://"+srv.Addr()+"/healthz") }
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
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := tlstest.NewCA(t)
	ca.Issue(t, 100, certFile, keyFile)
	cfg := DefaultServerConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.TLS = TLSConfig{CertFile: certFile, KeyFile: keyFile}
	srv := NewServer(cfg, Deps{})
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	served := func() int64 { return ca.Serial(t, "https://"+srv.Addr()+"/healthz") }

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
	expired := NewServer(cfg, Deps{})
	require.ErrorContains(t, expired.Start(context.Background()), "expired")
}
