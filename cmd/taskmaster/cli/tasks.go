package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/taskmaster/taskmaster/client"
)

type submitState struct {
	task           taskFlags
	deadline       string
	runAt          string
	idempotencyKey string
	dependsOn      multiFlag
	group          string
	wait           time.Duration
	workflow       string
	debounce       time.Duration
	debounceMax    time.Duration
	throttle       time.Duration
}

func submitFlags(fs *flag.FlagSet, e *env) {
	s := &submitState{}
	e.state = s
	s.task.register(fs)
	fs.StringVar(&s.deadline, "deadline", "", "DEAD if still PENDING at this time: RFC 3339, or a duration from now (1h)")
	fs.StringVar(&s.runAt, "run-at", "", "earliest claim: RFC 3339, or a delay from now (30s)")
	fs.StringVar(&s.idempotencyKey, "idempotency-key", "", "a resubmission with this key returns the same task")
	fs.Var(&s.dependsOn, "depends-on", "the id of a task that must be DONE first (repeatable): BLOCKED until then")
	fs.StringVar(&s.group, "group", "", "the task's group in its queue (a tenant): claims take turns across groups")
	fs.DurationVar(&s.wait, "wait", 0, "wait up to this long for the task to be DONE or DEAD, then show it as it is (30s)")
	fs.StringVar(&s.workflow, "workflow", "", "the run (workflow id) the task joins")
	fs.DurationVar(&s.debounce, "debounce", 0, "with --unique-key: replace the PENDING holder's payload and push its run_at this far (1m)")
	fs.DurationVar(&s.debounceMax, "debounce-max", 0, "with --debounce: never push run_at past this long after the first submission (default 10 x --debounce)")
	fs.DurationVar(&s.throttle, "throttle", 0, "with --unique-key: answer with the key's last holder while it finished less than this long ago (1h)")
}

type getState struct{ wait time.Duration }

func getFlags(fs *flag.FlagSet, e *env) {
	s := &getState{}
	e.state = s
	fs.DurationVar(&s.wait, "wait", 0, "wait up to this long for the task to be DONE or DEAD, then show it as it is (30s)")
}

// waitForTask returns task id once it is DONE or DEAD, or as it is when
// d has passed (the server holds the requests: nothing is polled).
func waitForTask(ctx context.Context, e *env, id string, d time.Duration) (*client.Task, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t, err := e.client.Wait(wctx, id)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return e.client.Get(ctx, id)
	}
	return t, err
}

func runSubmit(ctx context.Context, e *env, _ []string) error {
	s := e.state.(*submitState)
	if s.task.queue == "" {
		return usagef("submit: --queue is required")
	}
	retry, err := s.task.retry()
	if err != nil {
		return err
	}
	if s.wait < 0 {
		return usagef("--wait must not be negative")
	}
	p := client.SubmitParams{Queue: s.task.queue, Priority: s.task.priority, MaxAttempts: s.task.maxAttempts, Tags: s.task.tags,
		IdempotencyKey: s.idempotencyKey, UniqueKey: s.task.uniqueKey, Retry: retry, GroupKey: s.group,
		Debounce: s.debounce, DebounceMax: s.debounceMax, Throttle: s.throttle}
	if p.TimeoutSeconds, err = s.task.timeoutSeconds(); err != nil {
		return err
	}
	if p.Metadata, err = metadataOf("--metadata", s.task.metadata); err != nil {
		return err
	}
	if s.task.payload != "" {
		raw, err := readPayload(s.task.payload, e.Stdin)
		if err != nil {
			return err
		}
		p.Payload = raw
	}
	if p.Deadline, err = parseWhen("--deadline", s.deadline); err != nil {
		return err
	}
	if p.RunAt, err = parseWhen("--run-at", s.runAt); err != nil {
		return err
	}
	if len(s.dependsOn) > 0 || s.workflow != "" {
		// Dependencies and runs are a batch's: a batch of one.
		p.DependsOn = s.dependsOn
		ts, _, err := e.client.SubmitBatchToWorkflow(ctx, s.workflow, []client.SubmitParams{p})
		if err != nil {
			return err
		}
		t := &ts[0]
		if s.wait > 0 && !t.Finished() {
			if t, err = waitForTask(ctx, e, t.ID, s.wait); err != nil {
				return err
			}
		}
		return printTask(e, t)
	}
	t, err := e.client.Submit(ctx, p)
	if err != nil {
		return err
	}
	if s.wait > 0 && !t.Finished() {
		if t, err = waitForTask(ctx, e, t.ID, s.wait); err != nil {
			return err
		}
	}
	return printTask(e, t)
}

// readPayload reads JSON text, @FILE or @- (stdin), and checks it is JSON.
func readPayload(v string, stdin io.Reader) (json.RawMessage, error) {
	var raw []byte
	switch {
	case v == "@-":
		if stdin == nil {
			return nil, usagef("--payload @-: no standard input")
		}
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read payload from standard input: %w", err)
		}
		raw = b
	case strings.HasPrefix(v, "@"):
		b, err := os.ReadFile(v[1:])
		if err != nil {
			return nil, usagef("--payload: %v", err)
		}
		raw = b
	default:
		raw = []byte(v)
	}
	if !json.Valid(raw) {
		return nil, usagef("--payload is not valid JSON (quote a string as '\"text\"')")
	}
	return json.RawMessage(strings.TrimSpace(string(raw))), nil
}

// parseWhen reads an RFC 3339 time or a duration from now.
func parseWhen(name, v string) (*time.Time, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return &t, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		t := time.Now().Add(d).UTC()
		return &t, nil
	}
	return nil, usagef("%s: %q is neither an RFC 3339 time nor a duration", name, v)
}

func runGet(ctx context.Context, e *env, args []string) error {
	s := e.state.(*getState)
	var (
		t   *client.Task
		err error
	)
	switch {
	case s.wait < 0:
		return usagef("--wait must not be negative")
	case s.wait > 0:
		t, err = waitForTask(ctx, e, args[0], s.wait)
	default:
		t, err = e.client.Get(ctx, args[0])
	}
	if err != nil {
		return err
	}
	return printTask(e, t)
}

func runRetry(ctx context.Context, e *env, args []string) error {
	t, err := e.client.Retry(ctx, args[0])
	if err != nil {
		return err
	}
	return printTask(e, t)
}

func runCancel(ctx context.Context, e *env, args []string) error {
	t, err := e.client.Cancel(ctx, args[0])
	if err != nil {
		return err
	}
	return printTask(e, t)
}

type listState struct {
	queue    string
	status   string
	workflow string
	limit    int
	cursor   string
}

func listFlags(fs *flag.FlagSet, e *env) {
	s := &listState{}
	e.state = s
	fs.StringVar(&s.queue, "queue", "", "only this queue")
	fs.StringVar(&s.status, "status", "", "only this status: PENDING, RUNNING, DONE, DEAD or BLOCKED")
	fs.StringVar(&s.workflow, "workflow", "", "only the tasks of this run (workflow id)")
	fs.IntVar(&s.limit, "limit", 0, "page size, 1-1000 (default: the server's, 100)")
	fs.StringVar(&s.cursor, "cursor", "", "the next page's cursor, from the previous page")
}

func runList(ctx context.Context, e *env, _ []string) error {
	s := e.state.(*listState)
	page, err := e.client.List(ctx, client.ListParams{Queue: s.queue, Status: client.Status(strings.ToUpper(s.status)), WorkflowID: s.workflow,
		Limit: s.limit, Cursor: s.cursor})
	if err != nil {
		return err
	}
	if e.json {
		var next *string
		if page.NextCursor != "" {
			next = &page.NextCursor
		}
		return printJSON(e.Stdout, struct {
			Tasks      []client.Task `json:"tasks"`
			NextCursor *string       `json:"next_cursor"`
		}{nonNil(page.Tasks), next})
	}
	tw := table(e.Stdout)
	fmt.Fprintln(tw, "ID\tQUEUE\tSTATUS\tPRIORITY\tATTEMPTS\tCREATED\tRUN AT\tLAST ERROR")
	for _, t := range page.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d/%d\t%s\t%s\t%s\n", t.ID, t.Queue, statusText(t), t.Priority, t.Attempts, t.MaxAttempts,
			when(&t.CreatedAt), when(&t.RunAt), oneLine(t.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		fmt.Fprintf(e.Stdout, "\nmore: taskmaster list --cursor %s", page.NextCursor)
		if s.queue != "" {
			fmt.Fprintf(e.Stdout, " --queue %s", s.queue)
		}
		if s.status != "" {
			fmt.Fprintf(e.Stdout, " --status %s", s.status)
		}
		if s.workflow != "" {
			fmt.Fprintf(e.Stdout, " --workflow %s", s.workflow)
		}
		if s.limit != 0 {
			fmt.Fprintf(e.Stdout, " --limit %d", s.limit)
		}
		fmt.Fprintln(e.Stdout)
	}
	return nil
}

// printTask prints one task as a two-column table, or as JSON.
func printTask(e *env, t *client.Task) error {
	if e.json {
		return printJSON(e.Stdout, t)
	}
	tw := table(e.Stdout)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ID", t.ID)
	row("Queue", t.Queue)
	row("Status", statusText(*t))
	row("Priority", fmt.Sprint(t.Priority))
	row("Attempts", fmt.Sprintf("%d of %d", t.Attempts, t.MaxAttempts))
	row("Tags", orDash(strings.Join(t.Tags, ", ")))
	row("Payload", compactJSON(t.Payload))
	row("Result", compactJSON(t.Result))
	row("Last error", orDash(oneLine(t.LastError, 200)))
	row("Worker", orDash(t.WorkerID))
	row("Lease", orDash(t.LeaseID))
	row("Idempotency key", orDash(t.IdempotencyKey))
	row("Unique key", orDash(t.UniqueKey))
	row("Group", orDash(t.GroupKey))
	if t.WorkflowID != "" && t.WorkflowID != t.ID {
		row("Workflow", t.WorkflowID)
	}
	if t.ReplayOf != "" {
		row("Replay of", t.ReplayOf)
	}
	if t.DebounceUntil != nil {
		row("Debounced until", when(t.DebounceUntil))
	}
	if len(t.Metadata) > 0 {
		keys := make([]string, 0, len(t.Metadata))
		for k := range t.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		pairs := make([]string, len(keys))
		for i, k := range keys {
			pairs[i] = k + "=" + t.Metadata[k]
		}
		row("Metadata", strings.Join(pairs, ", "))
	}
	if t.TimeoutSeconds > 0 {
		row("Time limit", (time.Duration(t.TimeoutSeconds) * time.Second).String())
	}
	if t.TimeoutAt != nil {
		row("Time limit ends", when(t.TimeoutAt))
	}
	if t.LastProgress != nil {
		progress := fmt.Sprintf("%g%%", t.LastProgress.Percent)
		if t.LastProgress.Message != "" {
			progress += " " + oneLine(t.LastProgress.Message, 120)
		}
		row("Progress", progress+" (at "+when(&t.LastProgress.UpdatedAt)+")")
	}
	if t.Trace != nil {
		row("Trace", t.Trace.Traceparent)
	}
	if t.Retry != nil {
		row("Retry", fmt.Sprintf("base %s, max %s, jitter %s", t.Retry.Base, t.Retry.Max, t.Retry.Jitter))
	}
	if t.Snoozes > 0 {
		row("Snoozes", fmt.Sprint(t.Snoozes))
	}
	if t.ScheduleName != "" {
		row("Schedule", t.ScheduleName+", tick "+when(t.ScheduleTick))
	}
	row("Created", when(&t.CreatedAt))
	row("Run at", when(&t.RunAt))
	row("Deadline", when(t.Deadline))
	row("Claimed", when(t.ClaimedAt))
	row("Finished", when(t.FinishedAt))
	row("Updated", when(&t.UpdatedAt))
	if t.DependsOn != nil {
		row("Depends on", orDash(strings.Join(t.DependsOn, ", ")))
		row("Blocked by", orDash(strings.Join(t.BlockedBy, ", ")))
	}
	return tw.Flush()
}

func runAttempts(ctx context.Context, e *env, args []string) error {
	as, err := e.client.Attempts(ctx, args[0])
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.Stdout, map[string]any{"attempts": nonNil(as)})
	}
	tw := table(e.Stdout)
	fmt.Fprintln(tw, "ATTEMPT\tWORKER\tCLAIMED\tFINISHED\tOUTCOME\tERROR")
	for _, a := range as {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, a.WorkerID, when(&a.ClaimedAt), when(a.FinishedAt),
			orText(string(a.Outcome), "(running)"), orDash(oneLine(a.Error, 60)))
	}
	return tw.Flush()
}

func statusText(t client.Task) string {
	if t.DeadReason != "" {
		return fmt.Sprintf("%s (%s)", t.Status, t.DeadReason)
	}
	return string(t.Status)
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "-"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return oneLine(b.String(), 200)
}

func oneLine(s string, most int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > most {
		return string(r[:most-1]) + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
