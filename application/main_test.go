package application_test

import (
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// TestMain is the one TestMain of this package's tests: the use cases run
// against the real PostgreSQL adapter, each test on its own database.
func TestMain(m *testing.M) { pgtest.Main(m) }

// services are the use cases over one test database.
type services struct {
	db      *sqlx.DB
	tx      *postgres.TxRunner
	tasks   *application.TaskService
	workers *application.WorkerService
}

func setup(t *testing.T) services { return setupTB(t) }

func setupTB(t testing.TB) services {
	t.Helper()
	db := pgtest.NewDB(t)
	tx := postgres.NewTxRunner(db)
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: worker.DefaultLivenessConfig()}
	return services{db: db, tx: tx, tasks: application.NewTaskService(tx, cfg), workers: application.NewWorkerService(tx, cfg)}
}

func ptr[T any](v T) *T { return &v }

// claimedTasks is the tasks of a claim's result, for tests that check them.
func claimedTasks(r ports.ClaimResult, err error) ([]*task.Task, error) { return r.Tasks, err }

// listedTasks unwraps a use case's page of tasks.
func listedTasks(p ports.TaskPage, err error) ([]*task.Task, error) { return p.Tasks, err }
