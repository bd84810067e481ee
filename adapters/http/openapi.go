package http

import (
	"net/http"
	"strconv"

	"github.com/taskmaster/taskmaster/docs"
)

// handleOpenAPI serves the embedded OpenAPI description (RFC 9512 media type).
func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(docs.OpenAPI)))
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(docs.OpenAPI)
}
