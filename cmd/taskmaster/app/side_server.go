package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
)

// sideServer serves one handler on a listener of its own, apart from the
// API's routes, middleware, timeouts and authentication: pprof
// (TASKMASTER_PPROF_ADDR) and the metrics (TASKMASTER_METRICS_ADDR). Bind it
// where only its users reach.
type sideServer struct {
	lifecycle.Base
	// name starts its log lines ("<name> listening").
	name    string
	addr    string
	handler http.Handler
	// grace is how long requests in flight may finish on Stop (0: they are
	// cut off).
	grace  time.Duration
	logger *zap.Logger
}

var _ lifecycle.Service = (*sideServer)(nil)

func (s *sideServer) Start(ctx context.Context) error {
	return s.StartLoop(ctx, s.name+" server", func(context.Context) (lifecycle.LoopFunc, error) {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", s.addr, err)
		}
		srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
		s.logger.Info(s.name+" listening", zap.String("addr", ln.Addr().String()))
		return func(ctx context.Context) {
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			select {
			case err := <-served:
				if !errors.Is(err, http.ErrServerClosed) {
					s.logger.Error(s.name+" server stopped", zap.Error(err))
				}
				<-ctx.Done()
				return
			case <-ctx.Done():
			}
			if s.grace > 0 {
				sctx, cancel := context.WithTimeout(context.Background(), s.grace)
				_ = srv.Shutdown(sctx)
				cancel()
			}
			_ = srv.Close() // what is still running is cut off
			<-served
		}, nil
	})
}

func (s *sideServer) Stop(ctx context.Context) error { return s.StopLoop(ctx) }
