// Package cli is the client side of the taskmaster binary: commands that
// talk to a Taskmaster server over HTTP through package client.
//
//	taskmaster submit --queue Q [--payload JSON|@file|@-] ...
//	taskmaster get ID | retry ID | cancel ID
//	taskmaster retry|cancel --queue Q --status S --reason R ... [--dry-run]   (bulk; see bulk.go)
//	taskmaster list [--queue Q] [--status S] [--limit N] [--cursor C]
//	taskmaster workers | queues
//	taskmaster worker --queue Q --exec 'cmd args' [--concurrency N] ...
//
//	taskmaster keys create|list|revoke ...   (see keys.go)
//	taskmaster schedule create|list|get|pause|resume|delete ...   (see schedules.go)
//	taskmaster queue list|show|pause|resume|set ...   (see queues.go)
//
// Every command takes --url (default $TASKMASTER_URL, else
// http://127.0.0.1:8080), sends the API key in $TASKMASTER_API_KEY, and
// prints a table, or JSON with --json.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/taskmaster/taskmaster/client"
)

// ErrUsage marks a command-line mistake; the binary exits with code 2.
var ErrUsage = errors.New("usage error")

// usageError is a command-line mistake with its explanation.
type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// IO is the process's surroundings.
type IO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// command is one subcommand.
type command struct {
	name    string
	args    string // positional arguments, for the usage line
	summary string
	run     func(ctx context.Context, e *env, positional []string) error
	flags   func(fs *flag.FlagSet, e *env)
	nargs   int // positional arguments required (anyArgs: the command checks them)
}

// anyArgs is the nargs of a command that checks its positional arguments
// itself.
const anyArgs = -1

func commands() []command {
	return []command{
		{name: "submit", summary: "submit a task", flags: submitFlags, run: runSubmit},
		{name: "get", args: "ID", summary: "show a task (--wait 30s: once it is DONE or DEAD)", flags: getFlags, nargs: 1, run: runGet},
		{name: "attempts", args: "ID", summary: "show a task's attempts and how each ended", nargs: 1, run: runAttempts},
		{name: "list", summary: "list tasks, newest first", flags: listFlags, run: runList},
		{name: "retry", args: "[ID]", summary: "move a DEAD task back to PENDING; with filter flags instead of ID, every DEAD task they match",
			flags: bulkFlags, nargs: anyArgs, run: runRetryCommand},
		{name: "cancel", args: "[ID]", summary: "cancel a PENDING or BLOCKED task, or ask a RUNNING task's worker to stop it; with filter flags, every task they match",
			flags: bulkFlags, nargs: anyArgs, run: runCancelCommand},
		{name: "replay", args: "[ID]", summary: "make a new task from a DONE or DEAD one; with filter flags instead of ID, from every one they match",
			flags: replayFlags, nargs: anyArgs, run: runReplayCommand},
		{name: "workflow", args: "...", summary: "see and steer a run of tasks: show|cancel|retry"},
		{name: "workers", summary: "list workers", run: runWorkers},
		{name: "drain", args: "WORKER", summary: "ask a worker to stop claiming (it finishes what it holds)", nargs: 1, run: runDrain},
		{name: "queues", summary: "show queue statistics", run: runQueues},
		{name: "worker", summary: "run a shell command once per task (a generic worker)", flags: workerFlags, run: runWorker},
		{name: "keys", args: "create|list|revoke", summary: "manage API keys (on the database with TASKMASTER_DATABASE_URL, else on the server)"},
		{name: "schedule", args: "...", summary: "manage recurring schedules: create|list|get|pause|resume|delete"},
		{name: "queue", args: "...", summary: "inspect and steer queues: list|show|pause|resume|set"},
		{name: "limits", args: "...", summary: "manage named limits that queues share: list|show|set|delete"},
	}
}

// Handles reports whether name is a command of this package.
func Handles(name string) bool {
	return slices.ContainsFunc(commands(), func(c command) bool { return c.name == name })
}

// Usage is the one-line summary of every command.
func Usage() string {
	var b strings.Builder
	for _, c := range commands() {
		fmt.Fprintf(&b, "  taskmaster %-8s %-4s %s\n", c.name, c.args, c.summary)
	}
	return b.String()
}

// env is what a command runs with.
type env struct {
	IO
	url     string
	json    bool
	command string
	flags   *flag.FlagSet
	state   any // the command's own flag values
	client  *client.Client
}

// Run runs args[0] with args[1:]. It returns an error wrapping ErrUsage for
// command-line mistakes.
func Run(ctx context.Context, args []string, io IO) error {
	if len(args) == 0 {
		return usagef("no command\n%s", Usage())
	}
	i := slices.IndexFunc(commands(), func(c command) bool { return c.name == args[0] })
	if i < 0 {
		return usagef("unknown command %q\n%s", args[0], Usage())
	}
	cmd := commands()[i]
	if io.Getenv == nil {
		io.Getenv = func(string) string { return "" }
	}
	switch cmd.name {
	case "keys":
		return runKeys(ctx, args[1:], io)
	case "schedule":
		return runSchedule(ctx, args[1:], io)
	case "queue":
		return runQueue(ctx, args[1:], io)
	case "workflow":
		return runWorkflow(ctx, args[1:], io)
	case "limits":
		return runLimits(ctx, args[1:], io)
	}
	e := &env{IO: io, command: cmd.name}
	fs := flag.NewFlagSet("taskmaster "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Stderr)
	fs.StringVar(&e.url, "url", defaultURL(io), "Taskmaster base URL (env TASKMASTER_URL)")
	if cmd.name != "worker" {
		fs.BoolVar(&e.json, "json", false, "print JSON instead of a table")
	}
	if cmd.flags != nil {
		cmd.flags(fs, e)
	}
	fs.Usage = func() {
		fmt.Fprintf(io.Stderr, "usage: %s\n  %s\n\nflags:\n", strings.TrimSpace("taskmaster "+cmd.name+" [flags] "+cmd.args), cmd.summary)
		fs.PrintDefaults()
	}
	e.flags = fs
	positional, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	if cmd.nargs != anyArgs && len(positional) != cmd.nargs {
		if cmd.nargs == 0 {
			return usagef("taskmaster %s takes no arguments, got %q", cmd.name, positional)
		}
		return usagef("usage: taskmaster %s [flags] %s", cmd.name, cmd.args)
	}
	c, err := client.New(e.url, client.WithUserAgent("taskmaster-cli/1"), client.WithAPIKey(io.Getenv(client.EnvAPIKey)))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	e.client = c
	if err := cmd.run(ctx, e, positional); err != nil {
		return &plainError{err: err}
	}
	return nil
}

// plainError drops the client package's "taskmaster: " prefix, which the
// binary prints itself.
type plainError struct{ err error }

func (e *plainError) Error() string { return strings.TrimPrefix(e.err.Error(), "taskmaster: ") }
func (e *plainError) Unwrap() error { return e.err }

// parseInterspersed parses flags wherever they appear among the positional
// arguments (`get ID --json` as well as `get --json ID`); "--" ends flags.
// parseArgs parses args with parseInterspersed and requires nargs
// positional arguments (else a usage error showing usage). done reports a
// -h that was answered: the command has nothing more to do.
func parseArgs(fs *flag.FlagSet, args []string, nargs int, usage string) (positional []string, done bool, err error) {
	positional, err = parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, &usageError{msg: err.Error()}
	}
	if len(positional) != nargs {
		return nil, false, usagef("%s", usage)
	}
	return positional, false, nil
}

func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// multiFlag is a repeatable string flag; values may also be comma-separated.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }

func (m *multiFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*m = append(*m, part)
		}
	}
	return nil
}

// intsFlag is a repeatable integer flag; values may be comma-separated.
type intsFlag []int

func (m *intsFlag) String() string {
	parts := make([]string, len(*m))
	for i, n := range *m {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (m *intsFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q is not an integer", part)
		}
		*m = append(*m, n)
	}
	return nil
}

// defaultURL is the server the commands talk to when --url is not given:
// TASKMASTER_URL, else client.DefaultURL.
func defaultURL(io IO) string {
	if u := io.Getenv("TASKMASTER_URL"); u != "" {
		return u
	}
	return client.DefaultURL
}

// subcommand reads the subcommand of a command group (`taskmaster keys
// create ...`) and returns it with a flag set for it that prints usage. It
// answers help itself (done): without arguments as a usage error, asked for
// (-h, --help, help) on stdout.
func subcommand(group, usage string, args []string, io IO) (sub string, fs *flag.FlagSet, done bool, err error) {
	if len(args) == 0 {
		return "", nil, true, usagef("%s", usage)
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(io.Stdout, usage)
		return "", nil, true, nil
	}
	sub = args[0]
	fs = flag.NewFlagSet("taskmaster "+group+" "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Stderr)
	fs.Usage = func() { fmt.Fprintln(io.Stderr, usage) }
	return sub, fs, false, nil
}
