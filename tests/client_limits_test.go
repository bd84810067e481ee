package tests

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/apikey"
)

// dashboardLogin posts the dashboard's login form with token from the
// server's own origin and returns the answer's status and session cookie.
func dashboardLogin(t *testing.T, base, token string) (int, *http.Cookie) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/ui/login",
		strings.NewReader(url.Values{"api_key": {token}, "next": {"/ui/"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	for _, c := range resp.Cookies() {
		if c.Name == "tm_session" {
			return resp.StatusCode, c
		}
	}
	return resp.StatusCode, nil
}

// dashboardGet loads a dashboard page with a session cookie.
func dashboardGet(t *testing.T, base, path string, session *http.Cookie) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
	require.NoError(t, err)
	req.AddCookie(session)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// slowBucket is a bucket of burst requests that refills too slowly to
// matter during a test.
func slowBucket(burst int) httpadapter.RateLimit {
	return httpadapter.RateLimit{Rate: 0.0001, Burst: burst}
}

// Dashboard pages are charged to the session's key, in the bucket its API
// requests use: with a read key of burst 5, five page loads pass, the sixth
// is a 429 page, and so is the key's next API request.
func TestDashboardRequestsAreChargedToTheSessionsKey(t *testing.T) {
	t.Parallel()
	s := startSecured(t, func(c *app.Config) {
		c.HTTP.RateLimits[apikey.ScopeRead] = slowBucket(5)
	})
	_, token := s.CreateKey(t, apikey.CreateParams{Name: "viewer", Scopes: []apikey.Scope{apikey.ScopeRead}})
	status, session := dashboardLogin(t, s.URL, token)
	require.Equal(t, http.StatusSeeOther, status)
	require.NotNil(t, session)
	for i := range 5 {
		require.Equal(t, http.StatusOK, dashboardGet(t, s.URL, "/ui/", session), "page %d is within the burst", i)
	}
	require.Equal(t, http.StatusTooManyRequests, dashboardGet(t, s.URL, "/ui/workers", session))
	r := s.anon.WithKey(token).Do(http.MethodGet, "/queues/v1", nil)
	r.Problem(t, http.StatusTooManyRequests, "rate-limited")
	require.NotEmpty(t, r.Header.Get("Retry-After"))
}

// Dashboard logins are limited per client address, whether they succeed or
// not: with a burst of 3, the fourth login, with a working key, is a 429.
func TestDashboardLoginsAreLimitedPerClient(t *testing.T) {
	t.Parallel()
	s := startSecured(t, func(c *app.Config) { c.HTTP.ClientRateLimit = slowBucket(3) })
	_, token := s.CreateKey(t, apikey.CreateParams{Name: "viewer", Scopes: []apikey.Scope{apikey.ScopeRead}})
	other, err := apikey.NewToken()
	require.NoError(t, err)
	for _, try := range []string{other, "not-a-key", token} {
		status, _ := dashboardLogin(t, s.URL, try)
		require.NotEqual(t, http.StatusTooManyRequests, status)
	}
	status, session := dashboardLogin(t, s.URL, token)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Nil(t, session)
}

// Requests whose token names no usable key are limited per client address:
// with a burst of 3, three random well-formed tokens are 401s, and then a
// token this instance has not seen work is a 429 without a lookup, even a
// working one (it would have passed had it been looked up). A key that
// worked before from that address keeps working. Malformed tokens cost no
// lookup and are not charged.
func TestUnknownTokensAreLimitedPerClientAddress(t *testing.T) {
	t.Parallel()
	s := startSecured(t, func(c *app.Config) { c.HTTP.ClientRateLimit = slowBucket(3) })
	_, fresh := s.CreateKey(t, apikey.CreateParams{Name: "fresh", Scopes: []apikey.Scope{apikey.ScopeRead}})
	s.admin.Do(http.MethodGet, "/queues/v1", nil).Expect(t, http.StatusOK, nil) // the admin key works here

	for range 5 {
		s.anon.WithKey("not-a-key").Do(http.MethodGet, "/queues/v1", nil).Problem(t, http.StatusUnauthorized, "unauthorized")
	}
	for range 3 {
		random, err := apikey.NewToken()
		require.NoError(t, err)
		s.anon.WithKey(random).Do(http.MethodGet, "/queues/v1", nil).Problem(t, http.StatusUnauthorized, "unauthorized")
	}
	random, err := apikey.NewToken()
	require.NoError(t, err)
	r := s.anon.WithKey(random).Do(http.MethodGet, "/queues/v1", nil)
	r.Problem(t, http.StatusTooManyRequests, "rate-limited")
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	s.anon.WithKey(fresh).Do(http.MethodGet, "/queues/v1", nil).Problem(t, http.StatusTooManyRequests, "rate-limited")
	s.admin.Do(http.MethodGet, "/queues/v1", nil).Expect(t, http.StatusOK, nil)
}
