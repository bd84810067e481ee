package app

import (
	"net/http"
	"net/http/pprof"

	"go.uber.org/fx"
	"go.uber.org/zap"
)

// newPprofServer serves net/http/pprof on its own listener when
// TASKMASTER_PPROF_ADDR is set (keep it on loopback: profiles reveal
// internals). It is separate from the API so profiling never shares the
// API's routes, timeouts or metrics; profiles in progress are cut off on
// stop.
func newPprofServer(lc fx.Lifecycle, cfg Config, logger *zap.Logger) {
	if cfg.PprofAddr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &sideServer{name: "pprof", addr: cfg.PprofAddr, handler: mux, logger: logger}
	lc.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
}
