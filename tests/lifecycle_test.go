package tests

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/taskmaster/taskmaster/adapters/cron"
	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	pushadapter "github.com/taskmaster/taskmaster/adapters/push"
	sealeradapter "github.com/taskmaster/taskmaster/adapters/sealer"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/push"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// runningService is a service under the stress test, with a way to tell
// that it does its work after a restart.
type runningService struct {
	name string
	svc  lifecycle.Service
	// works, when not nil, checks that the started service works.
	works func(t *testing.T)
}

// everyService builds each long-running service of `taskmaster serve` on a
// real database, as the fx wiring does.
func everyService(t *testing.T) []runningService {
	t.Helper()
	url := pgtest.NewDatabase(t)
	db, err := postgres.Open(t.Context(), url, postgres.PoolConfig{MaxOpen: 8, MaxIdle: 8})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	logger := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	tx := postgres.NewTxRunner(db)
	appCfg := defaultAppConfig()
	notifier := postgres.NewNotifier(url, postgres.DefaultConnConfig(), logger)
	tasks := application.NewTaskService(tx, appCfg, application.WithNotifier(notifier))
	srv := httpadapter.NewServer(httpadapter.ServerConfig{
		Addr: "127.0.0.1:0", MaxBodyBytes: 1 << 20, MaxBatchBodyBytes: 1 << 20, ShutdownTimeout: 5 * time.Second,
	}, httpadapter.Deps{
		Tasks: tasks, Workers: application.NewWorkerService(tx, appCfg), Health: postgres.NewHealth(db),
		Logger: logger, OnShutdown: []func(){notifier.CloseWaits},
	})
	ocfg := outbox.DefaultConfig()
	router, err := outbox.NewRouter(db.DB, ocfg, logger)
	require.NoError(t, err)
	janitor, err := outbox.NewJanitor(db.DB, ocfg, logger)
	require.NoError(t, err)
	streams, err := outbox.NewStreams(outbox.NewFeed(db.DB, ocfg.StreamReadBytes, logger), ocfg, logger)
	require.NoError(t, err)
	reaper := application.NewBackgroundService(application.BackgroundParams{
		Name: "stress-reaper", Interval: 10 * time.Millisecond, Elector: postgres.NewElector(db, "stress", time.Second), Logger: logger,
		Cycle: application.Cycle(application.NewLeaseReaper(tx, 0).Reap),
	})
	keys := application.NewKeyService(tx, application.KeyConfig{UsageInterval: 5 * time.Millisecond}, logger)
	schedules := application.NewScheduleService(tx, cron.Parse)
	scheduler := application.NewBackgroundService(application.BackgroundParams{
		Name: "stress-scheduler", Interval: 10 * time.Millisecond, Elector: postgres.NewElector(db, "stress", time.Second), Logger: logger,
		Cycle: application.Cycle(application.NewScheduler(tx, cron.Parse, 0).Run),
	})
	sealer, err := sealeradapter.New(nil)
	require.NoError(t, err)
	allow, err := push.ParseAllowList("127.0.0.1")
	require.NoError(t, err)
	workers := application.NewWorkerService(tx, appCfg)
	dispatcher := application.NewDispatcher(tasks, workers, tx, pushadapter.NewSender(pushadapter.SenderConfig{Allow: allow}), sealer,
		application.DispatcherConfig{WorkerID: "push:stress", Instance: "stress", Allow: allow, Refresh: 10 * time.Millisecond,
			DrainTimeout: 100 * time.Millisecond, ClaimWait: 100 * time.Millisecond}, logger)
	queues := application.NewQueueService(outbox.NewStatsReader(db), tx, application.WithPushDelivery(application.PushConfig{Allow: allow, Sealer: sealer}))
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.ReadAll(r.Body) }))
	t.Cleanup(endpoint.Close)
	return []runningService{
		{name: "push dispatcher", svc: dispatcher, works: func(t *testing.T) {
			u := endpoint.URL
			_, err := queues.UpdateSettings(t.Context(), "stress-push", queue.Patch{Push: queue.Optional[queue.PushPatch]{Set: true, Value: &queue.PushPatch{URL: &u}}})
			require.NoError(t, err)
			tk, _, err := tasks.Submit(t.Context(), task.SubmitParams{ID: uuid.Must(uuid.NewV7()), Queue: "stress-push"})
			require.NoError(t, err)
			awaitTrue(t, func() bool {
				got, err := tasks.Get(t.Context(), tk.ID())
				require.NoError(t, err)
				return got.Status() == task.StatusDone
			}, "the restarted dispatcher delivers")
		}},
		{name: "http server", svc: srv, works: func(t *testing.T) {
			resp, err := http.Get("http://" + srv.Addr() + "/healthz")
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}},
		{name: "notifier", svc: notifier, works: func(t *testing.T) {
			w := notifier.Wait(ports.WaitSpec{Queues: []string{"stress"}, Limit: 1})
			defer w.Close()
			_, err := db.ExecContext(t.Context(), `SELECT pg_notify($1, 'stress')`, postgres.NotifyChannel)
			require.NoError(t, err)
			select {
			case _, open := <-w.C():
				require.True(t, open, "a running notifier delivers, it does not close waits")
			case <-time.After(10 * time.Second):
				t.Fatal("no wake-up from a restarted notifier")
			}
		}},
		{name: "outbox router", svc: router},
		{name: "outbox janitor", svc: janitor},
		{name: "event streams", svc: streams, works: func(t *testing.T) {
			sub, err := streams.Subscribe(t.Context(), "")
			require.NoError(t, err, "a running reader serves streams")
			defer sub.Close()
			_, err = db.ExecContext(t.Context(), `INSERT INTO watermill_taskmaster_events (uuid, payload, transaction_id)
				VALUES (gen_random_uuid()::text, '{"events":[{"type":"task.submitted","queue":"stress"}]}', pg_current_xact_id())`)
			require.NoError(t, err)
			select {
			case page := <-sub.Pages():
				require.NotEmpty(t, page.Events)
			case <-time.After(30 * time.Second):
				t.Fatal("no event from a restarted reader")
			}
		}},
		{name: "background service", svc: reaper, works: func(t *testing.T) {
			awaitTrue(t, reaper.Leading, "the restarted job leads")
		}},
		{name: "scheduler", svc: scheduler, works: func(t *testing.T) {
			name := "stress-" + uuid.NewString()[:8]
			_, err := schedules.Create(t.Context(), schedule.CreateParams{Name: name, Cron: "@every 1s", Task: task.SubmitParams{Queue: name}})
			require.NoError(t, err)
			awaitTrue(t, func() bool {
				var n int
				require.NoError(t, db.GetContext(t.Context(), &n, `SELECT count(*) FROM tasks WHERE queue = $1`, name))
				return n > 0
			}, "the restarted scheduler runs a tick")
		}},
		{name: "key usage", svc: keys, works: func(t *testing.T) {
			k, token, err := keys.Create(t.Context(), apikey.CreateParams{Name: "stress", Scopes: []apikey.Scope{apikey.ScopeRead}})
			require.NoError(t, err)
			_, err = keys.Authenticate(t.Context(), token)
			require.NoError(t, err)
			awaitTrue(t, func() bool {
				var used bool
				require.NoError(t, db.GetContext(t.Context(), &used, `SELECT last_used_at IS NOT NULL FROM api_keys WHERE id = $1`, k.ID()))
				return used
			}, "the restarted service saves last_used_at")
		}},
	}
}

func defaultAppConfig() application.Config {
	c := application.Config{}
	c.Backoff.Base, c.Backoff.Cap = time.Second, time.Minute
	c.Liveness.StaleAfter, c.Liveness.DeadAfter = 30*time.Second, 120*time.Second
	return c
}

func awaitTrue(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out: %s", what)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEveryServiceSurvivesConcurrentStartsAndStops hammers each service's
// Start and Stop from several goroutines at once; afterwards Stop is safe to
// repeat, and the service starts again and works.
func TestEveryServiceSurvivesConcurrentStartsAndStops(t *testing.T) {
	t.Parallel()
	for _, rs := range everyService(t) {
		t.Run(rs.name, func(t *testing.T) {
			ctx := context.Background()
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range 8 {
						if (i+j)%2 == 0 {
							if err := rs.svc.Start(ctx); err != nil {
								require.ErrorIs(t, err, lifecycle.ErrAlreadyStarted)
							}
						} else {
							require.NoError(t, rs.svc.Stop(ctx))
						}
					}
				}()
			}
			wg.Wait()
			require.NoError(t, rs.svc.Stop(ctx))
			require.NoError(t, rs.svc.Stop(ctx), "a second Stop does nothing")

			require.NoError(t, rs.svc.Start(ctx), "a stopped service starts again")
			require.ErrorIs(t, rs.svc.Start(ctx), lifecycle.ErrAlreadyStarted)
			if rs.works != nil {
				rs.works(t)
			}
			require.NoError(t, rs.svc.Stop(ctx))
		})
	}
}
