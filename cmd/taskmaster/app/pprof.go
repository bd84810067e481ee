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

	"github.com/taskmaster/taskmaster/application/lifecycle"
)

// pprofServer serves net/http/pprof on its own listener when
// TASKMASTER_PPROF_ADDR is set (keep it on loopback: profiles reveal
// internals). It is separate from the API so profiling never shares the
// API's routes, timeouts or metrics.
type pprofServer struct {
	lifecycle.Base
	addr   string
	logger *zap.Logger
}

func newPprofServer(lc fx.Lifecycle, cfg Config, logger *zap.Logger) {
	if cfg.PprofAddr == "" {
		return
	}
	s := &pprofServer{addr: cfg.PprofAddr, logger: logger}
	lc.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
}

func (s *pprofServer) Start(ctx context.Context) error {
	return s.StartLoop(ctx, "pprof server", func(context.Context) (lifecycle.LoopFunc, error) {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return nil, err
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		s.logger.Info("pprof listening", zap.String("addr", ln.Addr().String()))
		return func(ctx context.Context) {
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			select {
			case err := <-served:
				if !errors.Is(err, http.ErrServerClosed) {
					s.logger.Error("pprof server stopped", zap.Error(err))
				}
				<-ctx.Done()
				return
			case <-ctx.Done():
			}
			_ = srv.Close() // profiles in progress are cut off
			<-served
		}, nil
	})
}

func (s *pprofServer) Stop(ctx context.Context) error { return s.StopLoop(ctx) }
