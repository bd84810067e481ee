package http

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// withTextQuery is router middleware (it runs after matching and
// authentication): on the API's routes every query parameter, name and
// value, must be text (validation.Text), else 422 naming the parameter,
// before any statement sees it: PostgreSQL refuses invalid UTF-8 and NUL in
// text with an error, which a filter must never reach.
func (s *Server) withTextQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.jsonRoutes[mux.CurrentRoute(r)] && r.URL.RawQuery != "" {
			var v validation.Errors
			v.CheckValues(r.URL.Query())
			if err := v.Err(); err != nil {
				writeError(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
