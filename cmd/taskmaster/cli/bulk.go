package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/taskmaster/taskmaster/client"
)

// `taskmaster retry` and `taskmaster cancel` act on one task by id, or, with
// filter flags instead, on every task the filter matches (a bulk action):
//
//	taskmaster retry --queue Q --status DEAD --reason exhausted --dry-run
//	taskmaster cancel --queue Q --created-before 2026-01-02T00:00:00Z
//
// `taskmaster queue purge Q [--status DEAD] [--dry-run] [--wait]` removes a
// queue's PENDING (default) or DEAD tasks (runQueuePurge).

// bulkState holds the filter flags of retry and cancel.
type bulkState struct {
	filter        client.TaskFilter
	createdBefore string
	createdAfter  string
	dryRun        bool
}

// bulkFilterFlags are the flags that make retry and cancel bulk actions.
var bulkFilterFlags = []string{"queue", "status", "reason", "group", "created-before", "created-after", "error-contains", "text", "workflow"}

func bulkFlags(fs *flag.FlagSet, e *env) {
	s := &bulkState{}
	e.state = s
	s.register(fs)
}

// register binds the filter flags and --dry-run to s.
func (s *bulkState) register(fs *flag.FlagSet) {
	fs.StringVar(&s.filter.Queue, "queue", "", "bulk: only this queue")
	fs.StringVar(&s.filter.Status, "status", "", "bulk: only these statuses, comma-separated (retry: DEAD; cancel: PENDING, BLOCKED, RUNNING; default all it can change)")
	fs.StringVar(&s.filter.DeadReason, "reason", "", "bulk: only DEAD tasks with this reason (exhausted, non_retryable, cancelled, ...)")
	fs.StringVar(&s.filter.GroupKey, "group", "", "bulk: only this group")
	fs.StringVar(&s.createdBefore, "created-before", "", "bulk: only tasks created before, an RFC 3339 time or a duration from now (-1h)")
	fs.StringVar(&s.createdAfter, "created-after", "", "bulk: only tasks created after, an RFC 3339 time or a duration from now (-24h)")
	fs.StringVar(&s.filter.ErrorContains, "error-contains", "", "bulk: only tasks whose last error contains this text (any case)")
	fs.StringVar(&s.filter.Text, "text", "", "bulk: only tasks whose last error or idempotency key contains this text (any case)")
	fs.StringVar(&s.filter.WorkflowID, "workflow", "", "bulk: only the tasks of this run (workflow id)")
	fs.BoolVar(&s.dryRun, "dry-run", false, "bulk: count the tasks the filter matches, change nothing")
}

// bulkFlagsSet lists the filter flags given, and reports whether --dry-run
// was.
func bulkFlagsSet(fs *flag.FlagSet) (set []string, dryRun bool) {
	fs.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "dry-run":
			dryRun = true
		case contains(bulkFilterFlags, f.Name):
			set = append(set, "--"+f.Name)
		}
	})
	return set, dryRun
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// runRetryCommand is `taskmaster retry ID` (runRetry) or, with filter
// flags, a bulk retry.
func runRetryCommand(ctx context.Context, e *env, args []string) error {
	return runBulkOrSingle(ctx, e, args, "retry", runRetry, e.client.BulkRetry)
}

// runCancelCommand is `taskmaster cancel ID` (runCancel) or, with filter
// flags, a bulk cancel.
func runCancelCommand(ctx context.Context, e *env, args []string) error {
	return runBulkOrSingle(ctx, e, args, "cancel", runCancel, e.client.BulkCancel)
}

func runBulkOrSingle(ctx context.Context, e *env, args []string, name string,
	single func(context.Context, *env, []string) error,
	bulk func(context.Context, client.TaskFilter, bool) (*client.BulkResult, error)) error {
	set, dryRun := bulkFlagsSet(e.flags)
	switch {
	case len(args) == 1 && len(set) == 0 && !dryRun:
		return single(ctx, e, args)
	case len(args) > 1 || (len(args) == 1 && (len(set) > 0 || dryRun)):
		return usagef("usage: taskmaster %s ID, or taskmaster %s FILTER FLAGS [--dry-run] for every task they match (not both)", name, name)
	case len(set) == 0:
		return usagef("usage: taskmaster %s ID, or taskmaster %s with filter flags (--%s) [--dry-run]", name, name, strings.Join(bulkFilterFlags, ", --"))
	}
	s := e.state.(*bulkState)
	f := s.filter
	f.Status = strings.ToUpper(f.Status)
	var err error
	if f.CreatedBefore, err = parseWhen("--created-before", s.createdBefore); err != nil {
		return err
	}
	if f.CreatedAfter, err = parseWhen("--created-after", s.createdAfter); err != nil {
		return err
	}
	res, err := bulk(ctx, f, s.dryRun)
	if err != nil {
		return err
	}
	return printBulkResult(e.IO, e.json, name, res)
}

// printBulkResult prints what a bulk action or purge did.
func printBulkResult(io IO, asJSON bool, action string, res *client.BulkResult) error {
	if asJSON {
		return printJSON(io.Stdout, res)
	}
	if res.DryRun {
		_, err := fmt.Fprintf(io.Stdout, "%d tasks match (dry run: nothing changed)\n", res.Matched)
		return err
	}
	done, verb := res.Changed, map[string]string{"retry": "retried", "cancel": "cancelled", "purge": "removed", "replay": "replayed"}[action]
	if action == "purge" {
		done = res.Removed
	}
	var n, skipped int64
	if done != nil {
		n = *done
	}
	if res.Skipped != nil {
		skipped = *res.Skipped
	}
	_, err := fmt.Fprintf(io.Stdout, "%d tasks matched, %d %s, %d skipped\n", res.Matched, n, verb, skipped)
	return err
}

const queuePurgeUsage = `usage:
  taskmaster queue purge QUEUE [--status PENDING|DEAD] [--dry-run] [--wait] [--json]

Removes the queue's PENDING tasks (RUNNING ones stay with their workers), or
with --status DEAD its dead letters; their dependants end DEAD
dependency_failed. A large purge runs in the background on the server:
--wait follows it until it is done.`

// runQueuePurge runs `taskmaster queue purge QUEUE [flags]`; args are the
// arguments after "purge".
func runQueuePurge(ctx context.Context, args []string, io IO) error {
	fs := flag.NewFlagSet("taskmaster queue purge", flag.ContinueOnError)
	fs.SetOutput(io.Stderr)
	fs.Usage = func() { fmt.Fprintln(io.Stderr, queuePurgeUsage) }
	var (
		url, status      string
		asJSON, dry, wai bool
	)
	fs.StringVar(&url, "url", defaultURL(io), "Taskmaster base URL (env TASKMASTER_URL)")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	fs.StringVar(&status, "status", "", "PENDING (default) or DEAD")
	fs.BoolVar(&dry, "dry-run", false, "count the tasks, remove nothing")
	fs.BoolVar(&wai, "wait", false, "follow a background purge until it is done")
	positional, done, err := parseArgs(fs, args, 1, queuePurgeUsage)
	if done || err != nil {
		return err
	}
	c, err := client.New(url, client.WithUserAgent("taskmaster-cli/1"), client.WithAPIKey(io.Getenv(client.EnvAPIKey)))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	res, err := c.PurgeQueue(ctx, positional[0], client.PurgeParams{Status: strings.ToUpper(status), DryRun: dry})
	if err != nil {
		return &plainError{err: err}
	}
	if res.Result != nil {
		return printBulkResult(io, asJSON, "purge", res.Result)
	}
	job := res.Job
	for wai && !job.Finished() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if job, err = c.PurgeProgress(ctx, job.Queue, job.ID); err != nil {
			return &plainError{err: err}
		}
	}
	if asJSON {
		return printJSON(io.Stdout, job)
	}
	if _, err := fmt.Fprintf(io.Stdout, "purge %s of queue %s: %s, %d of %d tasks removed\n",
		job.ID, job.Queue, job.State, job.Removed, job.Matched); err != nil {
		return err
	}
	if job.State == "failed" {
		return fmt.Errorf("purge %s failed: %s", job.ID, job.Error)
	}
	return nil
}
