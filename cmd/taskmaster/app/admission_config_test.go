package app_test

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
)

// loadAdmission loads the configuration of `serve` from env and args.
func loadAdmission(env map[string]string, args ...string) (app.Config, error) {
	env["TASKMASTER_DATABASE_URL"] = "postgres://u@h/db"
	return app.LoadConfig("serve", args, func(k string) string { return env[k] }, io.Discard)
}

// The admission caps have documented defaults, are set by environment or
// flag, and a cap that would refuse every request is a configuration error
// naming its variable.
func TestAdmissionSettings(t *testing.T) {
	t.Parallel()
	cfg, err := loadAdmission(map[string]string{})
	require.NoError(t, err)
	require.Equal(t, httpadapter.DefaultMaxInFlightRequests, cfg.HTTP.MaxInFlightRequests)
	require.Equal(t, httpadapter.DefaultMaxInFlightClaims, cfg.HTTP.MaxInFlightClaims)
	require.EqualValues(t, httpadapter.DefaultMaxInFlightBodyBytes, cfg.HTTP.MaxInFlightBodyBytes)

	cfg, err = loadAdmission(map[string]string{"TASKMASTER_MAX_INFLIGHT_REQUESTS": "10", "TASKMASTER_MAX_INFLIGHT_CLAIMS": "20"},
		"--max-inflight-body-bytes", "33554432")
	require.NoError(t, err)
	require.Equal(t, 10, cfg.HTTP.MaxInFlightRequests)
	require.Equal(t, 20, cfg.HTTP.MaxInFlightClaims)
	require.EqualValues(t, 32<<20, cfg.HTTP.MaxInFlightBodyBytes)

	for env, want := range map[string]string{
		"TASKMASTER_MAX_INFLIGHT_REQUESTS":   "0",
		"TASKMASTER_MAX_INFLIGHT_CLAIMS":     "-1",
		"TASKMASTER_MAX_INFLIGHT_BODY_BYTES": "1048576", // below the 16 MiB batch body limit
	} {
		_, err := loadAdmission(map[string]string{env: want})
		var cfgErr *app.ConfigError
		require.ErrorAs(t, err, &cfgErr, env)
		require.ErrorContains(t, err, env)
	}
	_, err = loadAdmission(map[string]string{"TASKMASTER_MAX_INFLIGHT_BODY_BYTES": "1048576", "TASKMASTER_MAX_BATCH_BODY_BYTES": "1048576"})
	require.NoError(t, err, "a body cap as large as the largest body accepted is enough")
}
