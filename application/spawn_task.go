package application

import (
	"context"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// Spawn creates cmd.Tasks on behalf of the task its holder is running,
// which stays RUNNING: the children a running task discovers, and a join
// that depends on them (cmd.Graph: refs of earlier items, ids of existing
// tasks, the spawning task's included). Like a report it is fenced by the
// holder's lease (a stale holder spawns nothing), counts as its worker's
// sign of life and shares transactions with concurrent reports; a task an
// operator asked to cancel spawns nothing (task.ErrCancelRequested). The
// children join the task's run and are created atomically, validation
// all-or-nothing ("tasks[3].queue"), as a batch graph's (createGraph).
// Spawning is producing: the principal needs the produce scope as well as
// work, and may spawn only into queues it may use.
func (s *TaskService) Spawn(ctx context.Context, cmd ports.SpawnCommand) ([]*task.Task, []bool, error) {
	var v validation.Errors
	checkReporter(&v, cmd.WorkerID)
	checkLease(&v, "lease_id", cmd.LeaseID)
	switch {
	case len(cmd.Tasks) == 0:
		v.Add("tasks", "must hold at least one task")
	case len(cmd.Tasks) > MaxEnqueue:
		v.Add("tasks", fmt.Sprintf("must hold at most %d tasks", MaxEnqueue))
	default:
		if err := prepareEnqueue("tasks", cmd.Tasks, &v); err != nil {
			return nil, nil, err
		}
	}
	parents, err := resolveGraph(&v, "tasks", cmd.Tasks, cmd.Graph)
	if err != nil {
		return nil, nil, err
	}
	if err := v.Err(); err != nil {
		return nil, nil, err
	}
	if parents == nil {
		parents = make([][]task.ParentRef, len(cmd.Tasks))
	}
	if err := checkEnqueueAccess(ctx, cmd.Tasks); err != nil {
		return nil, nil, err
	}
	check := func(st ports.Stores) error {
		return checkPayloads(st, "tasks", cmd.Tasks)
	}
	decide := func(t *task.Task, now time.Time) ([]event.Event, error) {
		if err := t.CheckSpawn(cmd.WorkerID, *cmd.LeaseID); err != nil {
			return nil, err
		}
		joinRun(cmd.Tasks, t)
		// A deadline already past is refused before anything is created.
		_, err := buildEnqueue(cmd.Tasks, "tasks", now)
		return nil, err
	}
	var (
		out     []*task.Task
		created []bool
	)
	then := func(ctx context.Context, st ports.Stores) error {
		var err error
		out, created, err = createGraph(ctx, st, "tasks", cmd.Tasks, parents)
		return err
	}
	if _, err := s.updateReported(ctx, cmd.TaskID, cmd.WorkerID, check, decide, then); err != nil {
		return nil, nil, fmt.Errorf("spawn tasks: %w", err)
	}
	return out, created, nil
}
