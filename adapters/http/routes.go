package http

import (
	"net/http"

	"github.com/gorilla/mux"
)

// batchRoutes carry up to 1,000 items: their bodies may be up to
// MaxBatchBodyBytes instead of MaxBodyBytes.
var batchRoutes = map[string]bool{
	"/tasks/v1/batch":    true,
	"/tasks/v1/complete": true,
	"/tasks/v1/fail":     true,
}

// routes is the whole API surface at a glance.
func (s *Server) routes(r *mux.Router) {
	r.HandleFunc("/tasks/v1", s.handleSubmitTask).Methods(http.MethodPost)
	r.HandleFunc("/tasks/v1", s.handleListTasks).Methods(http.MethodGet)
	r.HandleFunc("/tasks/v1/batch", s.handleSubmitBatch).Methods(http.MethodPost)
	r.HandleFunc("/tasks/v1/claim", s.handleClaimTasks).Methods(http.MethodPost)
	r.HandleFunc("/tasks/v1/complete", s.handleCompleteBatch).Methods(http.MethodPost)
	r.HandleFunc("/tasks/v1/fail", s.handleFailBatch).Methods(http.MethodPost)
	r.HandleFunc("/tasks/v1/{id}", s.handleGetTask).Methods(http.MethodGet)
	r.HandleFunc("/tasks/v1/{id}/complete", s.handleCompleteTask).Methods(http.MethodPost)
	r.HandleFunc("/tasks/v1/{id}/fail", s.handleFailTask).Methods(http.MethodPost)
	r.HandleFunc("/tasks/v1/{id}/retry", s.handleRetryTask).Methods(http.MethodPost)
	r.HandleFunc("/tasks/v1/{id}/cancel", s.handleCancelTask).Methods(http.MethodPost)
	r.HandleFunc("/tasks/v1/{id}/extend", s.handleExtendLease).Methods(http.MethodPost)

	r.HandleFunc("/workers/v1/register", s.handleRegisterWorker).Methods(http.MethodPost)
	r.HandleFunc("/workers/v1/{id}/heartbeat", s.handleHeartbeat).Methods(http.MethodPost)
	r.HandleFunc("/workers/v1/{id}/drain", s.handleDrainWorker).Methods(http.MethodPost)
	r.HandleFunc("/workers/v1", s.handleListWorkers).Methods(http.MethodGet)

	r.HandleFunc("/queues/v1", s.handleListQueues).Methods(http.MethodGet)
	if s.events != nil {
		r.HandleFunc("/events/v1", s.handleEvents).Methods(http.MethodGet)
	}

	r.HandleFunc("/healthz", s.handleHealthz).Methods(http.MethodGet)
	r.HandleFunc("/readyz", s.handleReadyz).Methods(http.MethodGet)
	r.HandleFunc("/openapi.yaml", s.handleOpenAPI).Methods(http.MethodGet)

	for _, extra := range s.extraRoutes {
		r.Handle(extra.Path, extra.Handler).Methods(extra.Methods...)
	}

	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, newProblem(kindRoute, "no route matches "+r.URL.Path, nil))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, newProblem(kindMethod, r.Method+" is not allowed on "+r.URL.Path, nil))
	})
}
