package app

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"
)

// newPprofServer serves net/http/pprof on its own listener when
// TASKMASTER_PPROF_ADDR is set (keep it on loopback: profiles reveal
// internals). It is separate from the API so profiling never shares the
// API's routes, timeouts or metrics.
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
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", cfg.PprofAddr)
			if err != nil {
				return err
			}
			logger.Info("pprof listening", zap.String("addr", ln.Addr().String()))
			go func() {
				defer close(done)
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					logger.Error("pprof server stopped", zap.Error(err))
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			<-done
			return err
		},
	})
}
