package http

import (
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/ports"
)

// LimitJSON is a named limit: a budget the queues naming it share.
type LimitJSON struct {
	Name       string   `json:"name"`
	PerSecond  *float64 `json:"per_second"`
	Burst      *int     `json:"burst"`
	MaxRunning *int     `json:"max_running"`
	// Queues are the queues naming it.
	Queues []string `json:"queues"`
	// Running counts their RUNNING tasks now.
	Running int `json:"running"`
	// Tokens is the bucket's level now (null without per_second).
	Tokens    *float64  `json:"tokens"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// limitValuesJSON is what a named limit sets (the answer of a DELETE).
type limitValuesJSON struct {
	Name       string   `json:"name"`
	PerSecond  *float64 `json:"per_second"`
	Burst      *int     `json:"burst"`
	MaxRunning *int     `json:"max_running"`
}

func limitValues(l queue.Limit) limitValuesJSON {
	out := limitValuesJSON{Name: l.Name, MaxRunning: l.MaxRunning}
	if r := l.RateLimit; r != nil {
		perSecond, burst := r.PerSecond, r.Burst
		out.PerSecond, out.Burst = &perSecond, &burst
	}
	return out
}

func limitJSON(info ports.LimitInfo) LimitJSON {
	v := limitValues(info.Limit)
	return LimitJSON{Name: v.Name, PerSecond: v.PerSecond, Burst: v.Burst, MaxRunning: v.MaxRunning,
		Queues: append([]string{}, info.Queues...), Running: info.Running, Tokens: info.Tokens,
		CreatedAt: info.CreatedAt.UTC(), UpdatedAt: info.UpdatedAt.UTC()}
}

// putLimitRequest is the body of PUT /limits/v1/{name}: it replaces the
// limit's values (an absent one is none).
type putLimitRequest struct {
	PerSecond  *float64 `json:"per_second"`
	Burst      *int     `json:"burst"`
	MaxRunning *int     `json:"max_running"`
}

func (s *Server) handlePutLimit(w http.ResponseWriter, r *http.Request) {
	var req putLimitRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	info, created, err := s.namedLimits.Put(r.Context(), mux.Vars(r)["name"],
		queue.LimitParams{PerSecond: req.PerSecond, Burst: req.Burst, MaxRunning: req.MaxRunning})
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, limitJSON(info))
}

func (s *Server) handleGetLimit(w http.ResponseWriter, r *http.Request) {
	info, err := s.namedLimits.Get(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, limitJSON(info))
}

type limitsResponse struct {
	Limits []LimitJSON `json:"limits"`
}

func (s *Server) handleListLimits(w http.ResponseWriter, r *http.Request) {
	infos, err := s.namedLimits.List(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := limitsResponse{Limits: make([]LimitJSON, len(infos))}
	for i, info := range infos {
		out.Limits[i] = limitJSON(info)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleDeleteLimit(w http.ResponseWriter, r *http.Request) {
	l, err := s.namedLimits.Delete(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, limitValues(l))
}
