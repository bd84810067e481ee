package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/ports"
)

// FirstKeyCommand is the command that makes the first admin key, run with
// the server's TASKMASTER_DATABASE_URL; `serve` logs it when no key exists.
const FirstKeyCommand = "taskmaster keys create --name admin --scope admin"

// securitySettings are the configuration variables of authentication, rate
// limits, TLS and the metrics listener.
func securitySettings() []setting {
	out := []setting{
		{"TASKMASTER_AUTH", "auth", "API keys on or off (default: on, unless TASKMASTER_HTTP_ADDR is a loopback address)",
			func(c *Config, v string) error {
				c.HTTP.Auth = httpadapter.AuthMode(strings.ToLower(strings.TrimSpace(v)))
				return c.HTTP.Auth.Validate()
			},
			func(c *Config) string {
				if c.HTTP.AuthEnabled() {
					return "on"
				}
				return "off"
			}},
		{"TASKMASTER_TLS_CERT_FILE", "tls-cert-file", "serve HTTPS with this PEM certificate (chain); reloaded on SIGHUP",
			func(c *Config, v string) error { c.HTTP.TLS.CertFile = v; return nil },
			func(c *Config) string { return c.HTTP.TLS.CertFile }},
		{"TASKMASTER_TLS_KEY_FILE", "tls-key-file", "the PEM private key of TASKMASTER_TLS_CERT_FILE; reloaded on SIGHUP",
			func(c *Config, v string) error { c.HTTP.TLS.KeyFile = v; return nil },
			func(c *Config) string { return c.HTTP.TLS.KeyFile }},
		{"TASKMASTER_METRICS_ADDR", "metrics-addr", "also serve /metrics on this address, without authentication (empty: off)",
			func(c *Config, v string) error { c.MetricsAddr = v; return nil },
			func(c *Config) string { return c.MetricsAddr }},
	}
	for _, scope := range apikey.Scopes() {
		out = append(out, setting{
			"TASKMASTER_RATE_LIMIT_" + strings.ToUpper(string(scope)), "rate-limit-" + string(scope),
			"requests per second and burst of each key with the " + string(scope) + " scope, per instance: RATE,BURST or off",
			func(c *Config, v string) error {
				l, err := httpadapter.ParseRateLimit(strings.TrimSpace(v))
				c.HTTP.RateLimits[scope] = l
				return err
			},
			func(c *Config) string { return c.HTTP.RateLimits[scope].String() },
		})
	}
	out = append(out, setting{
		"TASKMASTER_RATE_LIMIT_CLIENT", "rate-limit-client",
		"requests per second and burst, per client address and instance, of requests whose key or dashboard session names nothing usable, and of dashboard logins: RATE,BURST or off",
		func(c *Config, v string) error {
			var err error
			c.HTTP.ClientRateLimit, err = httpadapter.ParseRateLimit(strings.TrimSpace(v))
			return err
		},
		func(c *Config) string { return c.HTTP.ClientRateLimit.String() },
	})
	return out
}

// validateSecurity reports the security settings' mistakes through add.
func (c Config) validateSecurity(add func(name string, err error)) {
	add("TASKMASTER_TLS_CERT_FILE", c.HTTP.TLS.Validate())
	add("TASKMASTER_AUTH", c.HTTP.Auth.Validate())
	for scope, l := range c.HTTP.RateLimits {
		add("TASKMASTER_RATE_LIMIT_"+strings.ToUpper(string(scope)), l.Validate())
	}
	add("TASKMASTER_RATE_LIMIT_CLIENT", c.HTTP.ClientRateLimit.Validate())
	if c.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			add("TASKMASTER_METRICS_ADDR", fmt.Errorf("must be host:port: %w", err))
		} else if c.MetricsAddr == c.HTTP.Addr && port != "0" {
			add("TASKMASTER_METRICS_ADDR", errors.New("must differ from TASKMASTER_HTTP_ADDR"))
		}
	}
	add("TASKMASTER_KEY_CACHE", c.Keys.Validate())
}

// securityOptions wire the key service (authentication, the admin API of
// keys, last-used stamps), the metrics listener, the reload of the TLS
// certificate on SIGHUP, and the warnings `serve` logs at every start.
func securityOptions() fx.Option {
	return fx.Options(
		fx.Provide(
			newKeyService,
			func(k *application.KeyService) ports.KeyService { return k },
			// One set of limits for the API and the dashboard: a key's
			// requests and its sessions' pages share its bucket.
			func(cfg httpadapter.ServerConfig) *httpadapter.Limits {
				return httpadapter.NewLimits(cfg.RateLimits, cfg.ClientRateLimit)
			},
		),
		fx.Invoke(newMetricsServer, newHangupReloader, logSecurityPosture),
	)
}

func newKeyService(lc fx.Lifecycle, tx ports.TxRunner, cfg Config, logger *zap.Logger) *application.KeyService {
	k := application.NewKeyService(tx, cfg.Keys, logger.Named("keys"))
	lc.Append(fx.Hook{OnStart: k.Start, OnStop: k.Stop})
	return k
}

// logSecurityPosture logs, at every start, what an operator must know:
// authentication off on a reachable address (a warning), authentication on
// with no key to authenticate with (and the command that makes the first),
// and plain HTTP on a reachable address.
func logSecurityPosture(lc fx.Lifecycle, cfg Config, keys ports.KeyService, logger *zap.Logger) {
	lc.Append(fx.StartHook(func(ctx context.Context) {
		addr := cfg.HTTP.Addr
		local := httpadapter.LoopbackAddr(addr)
		switch {
		case !cfg.HTTP.AuthEnabled() && !local:
			logger.Warn("authentication is off on an address other hosts can reach: anyone who reaches it can submit, "+
				"complete, cancel and read every task; set TASKMASTER_AUTH=on", zap.String("addr", addr))
		case !cfg.HTTP.AuthEnabled():
			logger.Info("authentication is off (loopback address); TASKMASTER_AUTH=on turns it on", zap.String("addr", addr))
		default:
			ok, err := keys.AnyUsable(ctx)
			if err != nil {
				logger.Warn("could not tell whether any API key exists", zap.Error(err))
			} else if !ok {
				logger.Warn("authentication is on and no usable API key exists: every request but /healthz and /readyz "+
					"is refused with 401; create the first admin key with this server's TASKMASTER_DATABASE_URL",
					zap.String("command", FirstKeyCommand))
			}
		}
		if !cfg.HTTP.TLS.Enabled() && !local {
			logger.Info("serving plain HTTP: terminate TLS in a proxy in front, or set TASKMASTER_TLS_CERT_FILE and TASKMASTER_TLS_KEY_FILE")
		}
	}))
}

// hangupReloader reloads the TLS certificate when the process gets SIGHUP
// (a certificate renewed by an ACME client, say). Catching SIGHUP also keeps
// it from terminating the process, its default action.
type hangupReloader struct {
	lifecycle.Base
	srv    *httpadapter.Server
	tls    bool
	logger *zap.Logger
}

func newHangupReloader(lc fx.Lifecycle, cfg Config, srv *httpadapter.Server, logger *zap.Logger) {
	h := &hangupReloader{srv: srv, tls: cfg.HTTP.TLS.Enabled(), logger: logger}
	lc.Append(fx.Hook{OnStart: h.Start, OnStop: h.Stop})
}

func (h *hangupReloader) Start(ctx context.Context) error {
	return h.StartLoop(ctx, "SIGHUP reloader", func(context.Context) (lifecycle.LoopFunc, error) {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGHUP)
		return func(ctx context.Context) {
			defer signal.Stop(sig)
			for {
				select {
				case <-ctx.Done():
					return
				case <-sig:
					h.reload()
				}
			}
		}, nil
	})
}

func (h *hangupReloader) reload() {
	if !h.tls {
		h.logger.Info("SIGHUP: nothing to reload (no TLS certificate configured)")
		return
	}
	if err := h.srv.ReloadTLS(); err != nil {
		h.logger.Error("SIGHUP: TLS certificate not reloaded; the previous one stays in use", zap.Error(err))
		return
	}
	h.logger.Info("SIGHUP: TLS certificate reloaded")
}

func (h *hangupReloader) Stop(ctx context.Context) error { return h.StopLoop(ctx) }

// newMetricsServer serves the metrics on TASKMASTER_METRICS_ADDR without
// authentication, for a Prometheus on a private network; the API serves
// them too, to keys with the read scope. Bind it to an address only the
// scraper reaches.
func newMetricsServer(lc fx.Lifecycle, cfg Config, reg *metrics.Registry, logger *zap.Logger) {
	if cfg.MetricsAddr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", reg.Handler())
	mux.Handle("GET /actuator/prometheus", reg.Handler())
	s := &sideServer{name: "metrics", addr: cfg.MetricsAddr, handler: mux, grace: 5 * time.Second, logger: logger}
	lc.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
}
