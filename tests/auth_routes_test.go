package tests

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// The route table is the one place that says what each route needs: every
// route on the real server's router (extra routes that other adapters mount
// included) declares its access where it is registered, and
// docs/openapi.yaml declares the same per operation (security: [] for a
// public route; one requirement {bearer: [scope]} per scope that will do).
func TestEveryRouteDeclaresItsScope(t *testing.T) {
	t.Parallel()
	var srv *httpadapter.Server
	testserver.StartOn(t, pgtest.NewDatabase(t), func(c *app.Config) { c.HTTP.Auth = httpadapter.AuthOn }, fx.Populate(&srv))
	doc := spectest.Load(t)
	routes := srv.Routes()
	require.NotEmpty(t, routes)
	var public []string
	for _, r := range routes {
		require.NotEmpty(t, r.Methods, "route %s answers any method: declare its methods", r.Path)
		for _, m := range r.Methods {
			name := m + " " + r.Path
			if !r.Access.Declared() {
				t.Errorf("route %s declares no access: give it httpadapter.Requires(scope...) or PublicAccess() where it is registered", name)
				continue
			}
			if r.Access.Public {
				public = append(public, name)
			}
			item := doc.Paths.Find(specPath(r.Path))
			if item == nil || item.GetOperation(m) == nil {
				continue // TestOpenAPICoversEveryRoute reports it
			}
			op := item.GetOperation(m)
			require.NotNil(t, op.Security, "%s (%s): docs/openapi.yaml must declare its security", name, op.OperationID)
			var documented []string
			for _, req := range *op.Security {
				require.Len(t, req, 1, "%s: one scheme per requirement", name)
				scopes, ok := req["bearer"]
				require.True(t, ok, "%s: the scheme is bearer", name)
				require.Len(t, scopes, 1, "%s: one scope per requirement (alternatives are separate requirements)", name)
				documented = append(documented, scopes[0])
			}
			var declared []string
			for _, s := range r.Access.Scopes {
				declared = append(declared, string(s))
			}
			slices.Sort(documented)
			slices.Sort(declared)
			require.Equal(t, declared, documented, "%s: the scopes in routes.go and docs/openapi.yaml (%s) differ", name, op.OperationID)
		}
	}
	slices.Sort(public)
	// The dashboard's pages and forms are public at this layer: the
	// dashboard checks its own session cookie, scope and CSRF token
	// (adapters/ui; tests/ui).
	require.Equal(t, []string{"GET /healthz", "GET /readyz", "GET /ui", "GET /ui/", "POST /ui/"}, public, "only the probes and the dashboard are public")
	require.NotNil(t, doc.Components.SecuritySchemes["bearer"])
	require.Equal(t, "bearer", strings.ToLower(doc.Components.SecuritySchemes["bearer"].Value.Scheme))
}
