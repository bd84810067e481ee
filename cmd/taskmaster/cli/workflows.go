package cli

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/taskmaster/taskmaster/client"
)

// `taskmaster replay ID` makes a new task from a DONE or DEAD one (with
// --payload, --priority, --max-attempts overrides), or with filter flags
// instead of ID, from every one they match (a bulk replay).
//
// `taskmaster workflow show|cancel|retry ID` reads and steers a run of
// tasks (its id is its first task's).

// replayState holds replay's overrides and the bulk filter flags.
type replayState struct {
	bulkState
	payload     string
	priority    int
	maxAttempts int
}

func replayFlags(fs *flag.FlagSet, e *env) {
	s := &replayState{}
	e.state = s
	s.register(fs)
	fs.StringVar(&s.payload, "payload", "", "single: the replay's payload instead of the original's: JSON, @FILE or @- (stdin)")
	fs.IntVar(&s.priority, "priority", 0, "single: the replay's priority instead of the original's")
	fs.IntVar(&s.maxAttempts, "max-attempts", 0, "single: the replay's max attempts instead of the original's, 1-100")
}

// runReplayCommand is `taskmaster replay ID` or, with filter flags, a bulk
// replay.
func runReplayCommand(ctx context.Context, e *env, args []string) error {
	s := e.state.(*replayState)
	e.state = &s.bulkState // what runBulkOrSingle's bulk path reads
	return runBulkOrSingle(ctx, e, args, "replay", func(ctx context.Context, e *env, args []string) error {
		var p client.ReplayParams
		if s.payload != "" {
			raw, err := readPayload(s.payload, e.Stdin)
			if err != nil {
				return err
			}
			p.Payload = raw
		}
		if s.priority != 0 {
			p.Priority = &s.priority
		}
		if s.maxAttempts != 0 {
			p.MaxAttempts = &s.maxAttempts
		}
		t, err := e.client.Replay(ctx, args[0], p)
		if err != nil {
			return err
		}
		return printTask(e, t)
	}, e.client.BulkReplay)
}

const workflowUsage = `usage:
  taskmaster workflow show ID [--limit N] [--cursor C] [--json]
  taskmaster workflow cancel ID [--json]
  taskmaster workflow retry ID [--json]

A run (workflow) is a task and every task its completes' enqueues, its
spawns, or its batch created; its id is its first task's. show counts its
tasks by status and lists them, oldest first; cancel cancels every
unfinished one (their workers learn it from their heartbeats); retry runs
again what failed and what failed with it.`

// runWorkflow runs `taskmaster workflow SUBCOMMAND ...`.
func runWorkflow(ctx context.Context, args []string, io IO) error {
	sub, fs, done, err := subcommand("workflow", workflowUsage, args, io)
	if done {
		return err
	}
	var (
		url, cursor string
		asJSON      bool
		limit       int
	)
	fs.StringVar(&url, "url", defaultURL(io), "Taskmaster base URL (env TASKMASTER_URL)")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	switch sub {
	case "show":
		fs.IntVar(&limit, "limit", 0, "tasks per page, 1-1000 (default 100)")
		fs.StringVar(&cursor, "cursor", "", "continue the tasks where the previous page ended")
	case "cancel", "retry":
	default:
		return usagef("unknown workflow command %q\n%s", sub, workflowUsage)
	}
	positional, done, err := parseArgs(fs, args[1:], 1, workflowUsage)
	if done || err != nil {
		return err
	}
	c, err := client.New(url, client.WithUserAgent("taskmaster-cli/1"), client.WithAPIKey(io.Getenv(client.EnvAPIKey)))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	id := positional[0]
	var out any
	switch sub {
	case "show":
		w, err := c.Workflow(ctx, id, limit, cursor)
		if err != nil {
			return &plainError{err: err}
		}
		if !asJSON {
			return printWorkflow(io, w)
		}
		out = w
	case "cancel", "retry":
		do := c.CancelWorkflow
		if sub == "retry" {
			do = c.RetryWorkflow
		}
		res, err := do(ctx, id)
		if err != nil {
			return &plainError{err: err}
		}
		if !asJSON {
			verb := map[string]string{"cancel": "cancelled or asked to stop", "retry": "retried"}[sub]
			fmt.Fprintf(io.Stdout, "%d tasks matched, %d %s, %d skipped", res.Matched, res.Changed, verb, res.Skipped)
			if sub == "retry" {
				fmt.Fprintf(io.Stdout, " (%d wait for their parents again)", res.Blocked)
			}
			fmt.Fprintln(io.Stdout)
			return nil
		}
		out = res
	}
	return printJSON(io.Stdout, out)
}

// printWorkflow prints a run's counts and its page of tasks.
func printWorkflow(io IO, w *client.Workflow) error {
	state := "running"
	if w.Finished {
		state = "finished"
	}
	fmt.Fprintf(io.Stdout, "Workflow %s: %d tasks, %s (first created %s, last updated %s)\n", w.ID, w.Total, state,
		when(&w.FirstCreatedAt), when(&w.LastUpdatedAt))
	var counts []string
	for _, st := range []client.Status{client.StatusPending, client.StatusBlocked, client.StatusRunning, client.StatusDone, client.StatusDead} {
		counts = append(counts, fmt.Sprintf("%s %d", st, w.StatusCounts[st]))
	}
	fmt.Fprintln(io.Stdout, strings.Join(counts, "  "))
	if len(w.DeadReasons) > 0 {
		reasons := make([]string, 0, len(w.DeadReasons))
		for r, n := range w.DeadReasons {
			reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
		}
		slices.Sort(reasons)
		fmt.Fprintln(io.Stdout, "DEAD: "+strings.Join(reasons, "  "))
	}
	fmt.Fprintln(io.Stdout)
	tw := table(io.Stdout)
	fmt.Fprintln(tw, "ID\tQUEUE\tSTATUS\tATTEMPTS\tCREATED\tLAST ERROR")
	for _, t := range w.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", t.ID, t.Queue, statusText(t), t.Attempts, t.MaxAttempts, when(&t.CreatedAt), oneLine(t.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if w.NextCursor != "" {
		fmt.Fprintf(io.Stdout, "\nmore: taskmaster workflow show %s --cursor %s\n", w.ID, w.NextCursor)
	}
	return nil
}
