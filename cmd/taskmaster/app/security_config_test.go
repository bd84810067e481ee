package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/apikey"
)

func TestSecuritySettings(t *testing.T) {
	t.Parallel()
	cfg, err := load(map[string]string{})
	require.NoError(t, err)
	require.False(t, cfg.HTTP.AuthEnabled(), "off by default on the loopback default address")
	require.Equal(t, httpadapter.DefaultRateLimits(), cfg.HTTP.RateLimits)
	for addr, on := range map[string]bool{
		"127.0.0.1:8080": false, "127.1.2.3:80": false, "[::1]:8080": false, "localhost:8080": false,
		"0.0.0.0:8080": true, ":8080": true, "10.0.0.5:8080": true, "[::]:8080": true, "myhost:8080": true,
	} {
		cfg, err := load(map[string]string{"TASKMASTER_HTTP_ADDR": addr})
		require.NoError(t, err, addr)
		require.Equal(t, on, cfg.HTTP.AuthEnabled(), addr)
	}
	cfg, err = load(map[string]string{"TASKMASTER_HTTP_ADDR": "0.0.0.0:8080", "TASKMASTER_AUTH": "off"})
	require.NoError(t, err)
	require.False(t, cfg.HTTP.AuthEnabled())
	cfg, err = load(map[string]string{"TASKMASTER_AUTH": "ON"}, "-rate-limit-work", "5,10", "-rate-limit-read", "off")
	require.NoError(t, err)
	require.True(t, cfg.HTTP.AuthEnabled())
	require.Equal(t, httpadapter.RateLimit{Rate: 5, Burst: 10}, cfg.HTTP.RateLimits[apikey.ScopeWork])
	require.True(t, cfg.HTTP.RateLimits[apikey.ScopeRead].Unlimited())

	for _, tc := range []struct {
		variable string
		env      map[string]string
	}{
		{"TASKMASTER_AUTH", map[string]string{"TASKMASTER_AUTH": "maybe"}},
		{"TASKMASTER_RATE_LIMIT_ADMIN", map[string]string{"TASKMASTER_RATE_LIMIT_ADMIN": "100"}},
		{"TASKMASTER_TLS_CERT_FILE", map[string]string{"TASKMASTER_TLS_KEY_FILE": "/etc/tls.key"}},
		{"TASKMASTER_METRICS_ADDR", map[string]string{"TASKMASTER_METRICS_ADDR": "nowhere"}},
		{"TASKMASTER_METRICS_ADDR", map[string]string{"TASKMASTER_METRICS_ADDR": "127.0.0.1:8080"}},
	} {
		_, err := load(tc.env)
		var cerr *app.ConfigError
		require.ErrorAs(t, err, &cerr, "%v", tc.env)
		require.ErrorContains(t, err, tc.variable, "%v", tc.env)
	}
}
