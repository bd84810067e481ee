package http

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

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
