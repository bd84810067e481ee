package tests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestSmokeSubmit(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	resp, err := http.Post(s.URL+"/tasks/v1", "application/json", strings.NewReader(`{"queue":"q"}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}
