package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/taskmaster/taskmaster/client"
)

// `taskmaster schedule create|list|get|pause|resume|delete` manages the
// recurring schedules of a server (--url, $TASKMASTER_URL) with the API key
// in $TASKMASTER_API_KEY (admin to change them, read to list them).

const scheduleUsage = `usage:
  taskmaster schedule create --name N --cron EXPR --queue Q [--timezone TZ] [--payload JSON|@FILE|@-]
                             [--priority N] [--max-attempts N] [--tag T] [--unique-key K]
                             [--retry-base 2s --retry-max 5m --retry-jitter none|full]
                             [--overlap skip|allow] [--paused] [--json]
  taskmaster schedule list [--json]
  taskmaster schedule get NAME [--json]
  taskmaster schedule pause NAME [--json]
  taskmaster schedule resume NAME [--json]
  taskmaster schedule delete NAME [--json]

EXPR is five fields ("0 9 * * MON-FRI"), a descriptor (@daily) or
"@every <duration>" (whole seconds). Each due tick creates one task; with
--overlap skip (the default) a tick whose previous task is unfinished
creates nothing. Missed ticks (an outage) collapse into the latest.`

type scheduleFlags struct {
	url      string
	json     bool
	name     string
	cron     string
	timezone string
	overlap  string
	paused   bool
	task     taskFlags
}

// taskFlags are the flags of a task's submission, shared by submit and
// schedule create.
type taskFlags struct {
	queue       string
	payload     string
	priority    int
	maxAttempts int
	tags        multiFlag
	uniqueKey   string
	retryBase   time.Duration
	retryMax    time.Duration
	retryJitter string
	timeout     time.Duration
	metadata    multiFlag
}

func (f *taskFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.queue, "queue", "", "queue name (required)")
	fs.StringVar(&f.payload, "payload", "", "payload: JSON text, @FILE, or @- for standard input")
	fs.IntVar(&f.priority, "priority", 0, "priority; higher is claimed first")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts before the task is DEAD, 1-100 (default: the server's, 3)")
	fs.Var(&f.tags, "tag", "a tag the claiming worker must have (repeatable)")
	fs.StringVar(&f.uniqueKey, "unique-key", "", "while an unfinished task of the queue has this key, submitting returns it instead of a new one")
	fs.DurationVar(&f.retryBase, "retry-base", 0, "the task's own backoff base, 100ms-1h: retries wait min(2^attempts x base, --retry-max)")
	fs.DurationVar(&f.retryMax, "retry-max", 0, "the task's own backoff cap, up to 7 days (default max(5m, --retry-base))")
	fs.StringVar(&f.retryJitter, "retry-jitter", "", "none (default) or full: wait a random time up to the delay")
	fs.DurationVar(&f.timeout, "timeout", 0, "time limit on each attempt, whole seconds from 1s to 24h (default: the queue's default_timeout_seconds)")
	fs.Var(&f.metadata, "metadata", "key=value the task carries (repeatable; keys of [A-Za-z0-9_.-])")
}

// timeoutSeconds is --timeout in seconds (0: none given).
func (f *taskFlags) timeoutSeconds() (int, error) {
	if f.timeout == 0 {
		return 0, nil
	}
	if f.timeout < time.Second || f.timeout%time.Second != 0 {
		return 0, usagef("--timeout must be whole seconds, at least 1s (%s)", f.timeout)
	}
	return int(f.timeout / time.Second), nil
}

// metadataOf reads key=value pairs (nil: none); a key given twice is a
// usage error.
func metadataOf(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usagef("%s %q: want key=value", flag, p)
		}
		if _, dup := out[k]; dup {
			return nil, usagef("%s: key %q given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

// retry is the backoff the flags ask for (nil: the server's).
func (f *taskFlags) retry() (*client.Backoff, error) {
	if f.retryBase == 0 {
		if f.retryMax != 0 || f.retryJitter != "" {
			return nil, usagef("--retry-max and --retry-jitter need --retry-base")
		}
		return nil, nil
	}
	return &client.Backoff{Base: f.retryBase, Max: f.retryMax, Jitter: client.Jitter(f.retryJitter)}, nil
}

// runSchedule runs `taskmaster schedule SUBCOMMAND ...`.
func runSchedule(ctx context.Context, args []string, io IO) error {
	sub, fs, done, err := subcommand("schedule", scheduleUsage, args, io)
	if done {
		return err
	}
	var f scheduleFlags
	fs.StringVar(&f.url, "url", defaultURL(io), "Taskmaster base URL (env TASKMASTER_URL)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	nargs := 1
	switch sub {
	case "create":
		nargs = 0
		fs.StringVar(&f.name, "name", "", "the schedule's name, 1-128 of [A-Za-z0-9._:-] (required)")
		fs.StringVar(&f.cron, "cron", "", `five fields, a descriptor (@daily) or "@every 30s" (required)`)
		fs.StringVar(&f.timezone, "timezone", "", "IANA time zone the expression is read in (default UTC)")
		fs.StringVar(&f.overlap, "overlap", "", "skip (default): no new task while the previous one is unfinished; allow: always")
		fs.BoolVar(&f.paused, "paused", false, "create it paused")
		f.task.register(fs)
	case "list":
		nargs = 0
	case "get", "pause", "resume", "delete":
	default:
		return usagef("unknown schedule command %q\n%s", sub, scheduleUsage)
	}
	positional, done, err := parseArgs(fs, args[1:], nargs, scheduleUsage)
	if done || err != nil {
		return err
	}
	c, err := client.New(f.url, client.WithUserAgent("taskmaster-cli/1"), client.WithAPIKey(io.Getenv(client.EnvAPIKey)))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	var scs []client.Schedule
	switch sub {
	case "create":
		var sc *client.Schedule
		if sc, err = scheduleCreate(ctx, c, f, io); sc != nil {
			scs = []client.Schedule{*sc}
		}
	case "list":
		scs, err = c.Schedules(ctx)
		if err == nil && f.json {
			return printJSON(io.Stdout, map[string]any{"schedules": nonNil(scs)})
		}
	default:
		var sc *client.Schedule
		switch sub {
		case "get":
			sc, err = c.Schedule(ctx, positional[0])
		case "pause":
			sc, err = c.PauseSchedule(ctx, positional[0])
		case "resume":
			sc, err = c.ResumeSchedule(ctx, positional[0])
		case "delete":
			sc, err = c.DeleteSchedule(ctx, positional[0])
		}
		if sc != nil {
			scs = []client.Schedule{*sc}
		}
	}
	if err != nil {
		return &plainError{err: err}
	}
	if f.json {
		return printJSON(io.Stdout, scs[0])
	}
	if sub == "delete" {
		_, err := fmt.Fprintf(io.Stdout, "deleted schedule %s (the tasks it created stay)\n", scs[0].Name)
		return err
	}
	return printSchedules(io, scs)
}

func scheduleCreate(ctx context.Context, c *client.Client, f scheduleFlags, io IO) (*client.Schedule, error) {
	if f.name == "" || f.cron == "" || f.task.queue == "" {
		return nil, usagef("schedule create: --name, --cron and --queue are required\n%s", scheduleUsage)
	}
	retry, err := f.task.retry()
	if err != nil {
		return nil, err
	}
	t := client.ScheduleTask{Queue: f.task.queue, Priority: f.task.priority, MaxAttempts: f.task.maxAttempts,
		Tags: f.task.tags, UniqueKey: f.task.uniqueKey, Retry: retry}
	if t.TimeoutSeconds, err = f.task.timeoutSeconds(); err != nil {
		return nil, err
	}
	if t.Metadata, err = metadataOf("--metadata", f.task.metadata); err != nil {
		return nil, err
	}
	if f.task.payload != "" {
		raw, err := readPayload(f.task.payload, io.Stdin)
		if err != nil {
			return nil, err
		}
		t.Payload = raw
	}
	return c.CreateSchedule(ctx, client.ScheduleParams{Name: f.name, Cron: f.cron, Timezone: f.timezone,
		Task: t, Overlap: client.Overlap(f.overlap), Paused: f.paused})
}

func printSchedules(io IO, scs []client.Schedule) error {
	tw := table(io.Stdout)
	fmt.Fprintln(tw, "NAME\tCRON\tTIMEZONE\tQUEUE\tOVERLAP\tSTATE\tNEXT RUN\tLAST TICK\tLAST TASK\tSKIPPED")
	for _, s := range scs {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", s.Name, s.Cron, s.Timezone, s.Task.Queue, s.Overlap, state,
			when(s.NextRunAt), when(s.LastTickAt), orDash(s.LastTaskID), s.SkippedTicks)
	}
	return tw.Flush()
}
