package application_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
	"github.com/taskmaster/taskmaster/tests/fuzzports"
)

// The validation of the use cases' commands, fuzzed. The stores are
// fuzzports' fixed world: validation runs before any of them is called, and
// the storage boundary has its own differential fuzz target on the real
// database (adapters/postgres).

func fuzzServices() *application.TaskService {
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: worker.DefaultLivenessConfig(), ClaimPollInterval: time.Millisecond}
	return application.NewTaskService(fuzzports.TxRunner{}, cfg)
}

// requireKnownError requires err to be nil or one of the errors a client
// can cause (a validation error naming only fields that match, a lease or
// transition error, an unknown task or worker): never anything the
// transport would answer with a 5xx.
func requireKnownError(t *testing.T, err error, fields *regexp.Regexp) {
	t.Helper()
	var (
		verr  *validation.Error
		lerr  *task.LeaseError
		trerr *task.TransitionError
	)
	switch {
	case err == nil, errors.As(err, &lerr), errors.As(err, &trerr),
		errors.Is(err, task.ErrNotFound), errors.Is(err, worker.ErrNotFound), errors.Is(err, worker.ErrDead):
	case errors.As(err, &verr):
		require.NotEmpty(t, verr.Fields)
		for _, f := range verr.Fields {
			require.Regexp(t, fields, f.Field)
		}
	default:
		require.Failf(t, "an error a client cannot have caused", "%v", err)
	}
}

var claimFields = regexp.MustCompile(`^(worker_id|queue|limit|wait_ms|lease_seconds)$`)

func FuzzClaimValidation(f *testing.F) {
	f.Add("w", "", 0, false, int64(0), false, 0, false)
	f.Add("mailer-1", "emails", 10, true, int64(5000), true, 600, true)
	f.Add("", "a/b", 0, true, int64(-1), true, 0, true)
	f.Add("w", "q", 1001, true, int64(30001), true, 43201, true)
	f.Add("w", "q", 1000, true, int64(30000), true, 43200, true)
	f.Fuzz(func(t *testing.T, workerID, queue string, limit int, hasLimit bool, waitMS int64, hasWait bool, lease int, hasLease bool) {
		cmd := ports.ClaimCommand{WorkerID: workerID, Queue: queue}
		if hasLimit {
			cmd.Limit = &limit
		}
		if hasWait {
			cmd.WaitMillis = &waitMS
		}
		if hasLease {
			cmd.LeaseSeconds = &lease
		}
		got, err := claimedTasks(fuzzServices().Claim(context.Background(), cmd))
		requireKnownError(t, err, claimFields)
		if err != nil {
			return
		}
		require.NotEmpty(t, workerID)
		require.True(t, queue == "" || task.ValidQueue(queue))
		require.True(t, !hasLimit || (limit >= 1 && limit <= application.MaxClaimLimit))
		require.True(t, !hasWait || (waitMS >= 0 && waitMS <= application.MaxClaimWait.Milliseconds()))
		require.True(t, !hasLease || (lease >= task.MinLeaseSeconds && lease <= task.MaxLeaseSeconds))
		for _, tk := range got {
			require.Equal(t, task.StatusRunning, tk.Status())
		}
	})
}

var listFields = regexp.MustCompile(`^(queue|status|limit)$`)

func FuzzListValidation(f *testing.F) {
	f.Add("", "", 0, false)
	f.Add("emails", "PENDING", 50, true)
	f.Add("a b", "pending", 0, true)
	f.Add("q", "DONE", 1001, true)
	f.Fuzz(func(t *testing.T, queue, status string, limit int, hasLimit bool) {
		q := ports.ListQuery{Queue: queue, Status: task.Status(status)}
		if hasLimit {
			q.Limit = &limit
		}
		page, err := fuzzServices().List(context.Background(), q)
		requireKnownError(t, err, listFields)
		if err == nil {
			require.True(t, queue == "" || task.ValidQueue(queue))
			require.True(t, status == "" || task.Status(status).Valid())
			require.True(t, !hasLimit || (limit >= 1 && limit <= application.MaxListLimit))
			require.NotNil(t, page.Tasks)
		}
	})
}

var reportFields = regexp.MustCompile(`^(worker_id|lease_id|result|error|lease_seconds|items|items\[\d+\]\.(id|lease_id|result|error))$`)

// FuzzReportValidation drives complete, fail, extend and the batch reports
// with the same fuzzed values.
func FuzzReportValidation(f *testing.F) {
	lease := fuzzports.Lease
	f.Add(fuzzports.Holder, lease[:], []byte(`{"ok":true}`), "boom", 600, true, uint8(2))
	f.Add("", []byte(nil), []byte(`"\u0000"`), "", 0, true, uint8(0))
	f.Add("other", uuid.Nil[:], []byte(`1e1000000`), string(make([]byte, 65<<10)), 43201, true, uint8(1))
	f.Add(fuzzports.Holder, lease[:], []byte(nil), "", 0, false, uint8(7))
	f.Fuzz(func(t *testing.T, workerID string, leaseBytes, result []byte, msg string, leaseSeconds int, hasLeaseSeconds bool, n uint8) {
		var leaseID *uuid.UUID
		if l, err := uuid.FromBytes(leaseBytes); err == nil {
			leaseID = &l
		}
		var ls *int
		if hasLeaseSeconds {
			ls = &leaseSeconds
		}
		ctx := context.Background()
		s := fuzzServices()
		id := uuid.New()
		_, err := s.Complete(ctx, ports.CompleteCommand{TaskID: id, WorkerID: workerID, LeaseID: leaseID, Result: result})
		requireKnownError(t, err, reportFields)
		_, err = s.Fail(ctx, ports.FailCommand{TaskID: id, WorkerID: workerID, LeaseID: leaseID, Error: msg, Retryable: n%2 == 0})
		requireKnownError(t, err, reportFields)
		_, err = s.Extend(ctx, ports.ExtendCommand{TaskID: id, WorkerID: workerID, LeaseID: leaseID, LeaseSeconds: ls})
		requireKnownError(t, err, reportFields)

		completes := make([]ports.CompleteItem, int(n)%12)
		fails := make([]ports.FailItem, len(completes))
		for i := range completes {
			tid := uuid.New()
			if i%5 == 4 {
				tid = id // a repeated id
			}
			completes[i] = ports.CompleteItem{TaskID: tid, LeaseID: leaseID, Result: result}
			fails[i] = ports.FailItem{TaskID: tid, LeaseID: leaseID, Error: msg, Retryable: i%2 == 0}
		}
		results, err := s.CompleteBatch(ctx, workerID, completes)
		requireKnownError(t, err, reportFields)
		if err == nil {
			require.Len(t, results, len(completes))
			for _, r := range results {
				requireKnownError(t, r.Err, reportFields)
			}
		}
		results, err = s.FailBatch(ctx, workerID, fails)
		requireKnownError(t, err, reportFields)
		if err == nil {
			require.Len(t, results, len(fails))
			for _, r := range results {
				requireKnownError(t, r.Err, reportFields)
			}
		}
	})
}
