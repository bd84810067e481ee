// Package docs holds the API description, embedded so the server can serve
// it at GET /openapi.yaml and tests can check it against the router.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml: the OpenAPI 3.1 description of the REST API.
//
//go:embed openapi.yaml
var OpenAPI []byte
