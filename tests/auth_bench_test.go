package tests

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// BenchmarkSingleTaskPath measures one task's way through the single-task
// endpoints (submit, claim, complete) over HTTP, one request at a time,
// with authentication off and on (a produce+work key, rate limits lifted),
// so the difference is the cost of authentication and the authorization
// checks on that path:
//
//	go test ./tests -run '^$' -bench SingleTaskPath -benchtime 2000x
func BenchmarkSingleTaskPath(b *testing.B) {
	for _, mode := range []httpadapter.AuthMode{httpadapter.AuthOff, httpadapter.AuthOn} {
		b.Run("auth="+string(mode), func(b *testing.B) {
			s := testserver.Start(b, func(c *app.Config) {
				c.HTTP.Auth = mode
				for scope := range c.HTTP.RateLimits {
					c.HTTP.RateLimits[scope] = httpadapter.RateLimit{}
				}
			})
			c := testclient.New(b, s.URL)
			if mode == httpadapter.AuthOn {
				_, token := s.CreateKey(b, apikey.CreateParams{Name: "bench", Scopes: []apikey.Scope{apikey.ScopeProduce, apikey.ScopeWork}})
				c = c.WithKey(token)
			}
			c.Register(jsonObj{"id": "bench", "queues": []string{"bench"}})
			b.ResetTimer()
			for range b.N {
				c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "bench"}).Expect(b, http.StatusCreated, nil)
				claimed := c.Claim(jsonObj{"worker_id": "bench"})
				require.Len(b, claimed, 1)
				c.Do(http.MethodPost, "/tasks/v1/"+claimed[0].ID+"/complete",
					jsonObj{"worker_id": "bench", "lease_id": claimed[0].Lease()}).Expect(b, http.StatusOK, nil)
			}
		})
	}
}
