package http

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/apikey"
)

// batchRoutes carry up to 1,000 items: their bodies may be up to
// MaxBatchBodyBytes instead of MaxBodyBytes.
var batchRoutes = map[string]bool{
	"/tasks/v1/batch":      true,
	"/tasks/v1/claim":      true, // it may carry reports
	"/tasks/v1/complete":   true,
	"/tasks/v1/fail":       true,
	"/tasks/v1/release":    true,
	"/tasks/v1/{id}/spawn": true,
}

// routes is the whole API surface at a glance, each route with the access
// it asks for: the one place that says which scope a route needs (a test
// checks that every route on the router declares one, and that
// docs/openapi.yaml declares the same per operation).
func (s *Server) routes(r *mux.Router) {
	var (
		public  = PublicAccess()
		admin   = Requires(apikey.ScopeAdmin)
		produce = Requires(apikey.ScopeProduce)
		work    = Requires(apikey.ScopeWork)
		read    = Requires(apikey.ScopeRead)
		// Tasks a producer may see: its own queues' (use cases apply a
		// key's queue limits).
		readTasks = Requires(apikey.ScopeRead, apikey.ScopeProduce)
		// A task's parents are its worker's input.
		readInput = Requires(apikey.ScopeWork, apikey.ScopeRead)
	)
	get, post, del, patch, put := http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPatch, http.MethodPut

	s.route(r, post, "/tasks/v1", produce, s.handleSubmitTask)
	s.route(r, get, "/tasks/v1", readTasks, s.handleListTasks)
	s.route(r, post, "/tasks/v1/batch", produce, s.handleSubmitBatch)
	if s.bulk != nil {
		// Before /tasks/v1/{id}/...: "bulk" is no task id.
		s.route(r, post, "/tasks/v1/bulk/retry", admin, s.handleBulkRetry)
		s.route(r, post, "/tasks/v1/bulk/cancel", admin, s.handleBulkCancel)
		s.route(r, post, "/tasks/v1/bulk/replay", admin, s.handleBulkReplay)
	}
	s.route(r, post, "/tasks/v1/claim", work, s.handleClaimTasks)
	s.route(r, post, "/tasks/v1/complete", work, s.handleCompleteBatch)
	s.route(r, post, "/tasks/v1/fail", work, s.handleFailBatch)
	s.route(r, post, "/tasks/v1/release", work, s.handleReleaseBatch)
	s.route(r, get, "/tasks/v1/{id}", readTasks, s.handleGetTask)
	s.route(r, get, "/tasks/v1/{id}/parents", readInput, s.handleTaskParents)
	s.route(r, get, "/tasks/v1/{id}/attempts", readTasks, s.handleTaskAttempts)
	s.route(r, post, "/tasks/v1/{id}/complete", work, s.handleCompleteTask)
	s.route(r, post, "/tasks/v1/{id}/fail", work, s.handleFailTask)
	s.route(r, post, "/tasks/v1/{id}/retry", admin, s.handleRetryTask)
	s.route(r, post, "/tasks/v1/{id}/cancel", admin, s.handleCancelTask)
	s.route(r, post, "/tasks/v1/{id}/extend", work, s.handleExtendLease)
	s.route(r, post, "/tasks/v1/{id}/snooze", work, s.handleSnoozeTask)
	s.route(r, post, "/tasks/v1/{id}/release", work, s.handleReleaseTask)
	s.route(r, post, "/tasks/v1/{id}/progress", work, s.handleReportProgress)
	s.route(r, post, "/tasks/v1/{id}/spawn", work, s.handleSpawn)
	s.route(r, post, "/tasks/v1/{id}/replay", produce, s.handleReplay)

	if s.workflows != nil {
		s.route(r, get, "/workflows/v1/{id}", readTasks, s.handleGetWorkflow)
		s.route(r, post, "/workflows/v1/{id}/cancel", admin, s.handleCancelWorkflow)
		s.route(r, post, "/workflows/v1/{id}/retry", admin, s.handleRetryWorkflow)
	}

	s.route(r, post, "/workers/v1/register", work, s.handleRegisterWorker)
	s.route(r, post, "/workers/v1/{id}/heartbeat", work, s.handleHeartbeat)
	s.route(r, post, "/workers/v1/{id}/drain", admin, s.handleDrainWorker)
	s.route(r, get, "/workers/v1", read, s.handleListWorkers)

	s.route(r, get, "/queues/v1", read, s.handleListQueues)
	if s.bulk != nil {
		s.route(r, post, "/queues/v1/{queue}/purge", admin, s.handlePurgeQueue)
		s.route(r, get, "/queues/v1/{queue}/purges/{id}", admin, s.handlePurgeProgress)
	}
	s.route(r, get, "/queues/v1/{queue}", read, s.handleGetQueue)
	s.route(r, patch, "/queues/v1/{queue}", admin, s.handlePatchQueue)
	if s.namedLimits != nil {
		// Named limits that queues share: operators' business.
		s.route(r, get, "/limits/v1", read, s.handleListLimits)
		s.route(r, get, "/limits/v1/{name}", read, s.handleGetLimit)
		s.route(r, put, "/limits/v1/{name}", admin, s.handlePutLimit)
		s.route(r, del, "/limits/v1/{name}", admin, s.handleDeleteLimit)
	}
	if s.events != nil {
		s.route(r, get, "/events/v1", read, s.handleEvents)
	}

	if s.schedules != nil {
		// Schedules create tasks on their own, forever: operators' business.
		s.route(r, post, "/schedules/v1", admin, s.handleCreateSchedule)
		s.route(r, get, "/schedules/v1", read, s.handleListSchedules)
		s.route(r, get, "/schedules/v1/{name}", read, s.handleGetSchedule)
		s.route(r, patch, "/schedules/v1/{name}", admin, s.handlePatchSchedule)
		s.route(r, del, "/schedules/v1/{name}", admin, s.handleDeleteSchedule)
	}

	s.route(r, post, "/admin/v1/keys", admin, s.handleCreateKey)
	s.route(r, get, "/admin/v1/keys", admin, s.handleListKeys)
	s.route(r, del, "/admin/v1/keys/{id}", admin, s.handleRevokeKey)

	s.route(r, get, "/healthz", public, s.handleHealthz)
	s.route(r, get, "/readyz", public, s.handleReadyz)
	s.route(r, get, "/openapi.yaml", read, s.handleOpenAPI)

	for _, extra := range s.extraRoutes {
		var route *mux.Route
		if extra.Prefix {
			route = r.PathPrefix(extra.Path).Handler(extra.Handler)
		} else {
			route = r.Handle(extra.Path, extra.Handler)
		}
		s.access[route.Methods(extra.Methods...)] = extra.Access
	}

	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, newProblem(kindRoute, "no route matches "+r.URL.Path, nil))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, newProblem(kindMethod, r.Method+" is not allowed on "+r.URL.Path, nil))
	})
}
