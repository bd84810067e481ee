package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/taskmaster/taskmaster/client"
)

// `taskmaster limits list|show|set|delete` manages the named limits of a
// server (--url, $TASKMASTER_URL) with the API key in $TASKMASTER_API_KEY
// (admin to change them, read to look).

const limitsUsage = `usage:
  taskmaster limits list [--json]
  taskmaster limits show NAME [--json]
  taskmaster limits set NAME [--rate R/s|R/m] [--burst N] [--max-running N] [--json]
  taskmaster limits delete NAME [--json]

A named limit is a budget several queues share: a token bucket (--rate,
holding --burst tokens, by default one second's worth) and a cap on their
RUNNING tasks together (--max-running), both held exactly across every
instance. set replaces the limit's values (those not given are none).
Queues draw on it once they name it: taskmaster queue set Q --limits NAME.
A limit that queues name cannot be deleted.`

type limitsFlags struct {
	url        string
	json       bool
	rate       string
	burst      int
	maxRunning int
	set        map[string]bool
}

// runLimits runs `taskmaster limits SUBCOMMAND ...`.
func runLimits(ctx context.Context, args []string, io IO) error {
	sub, fs, done, err := subcommand("limits", limitsUsage, args, io)
	if done {
		return err
	}
	var f limitsFlags
	fs.StringVar(&f.url, "url", defaultURL(io), "Taskmaster base URL (env TASKMASTER_URL)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	nargs := 1
	switch sub {
	case "list":
		nargs = 0
	case "set":
		fs.StringVar(&f.rate, "rate", "", "tokens per second of the shared bucket (50/s, 50, 3000/m)")
		fs.IntVar(&f.burst, "burst", 0, "tokens the bucket holds (default: one second's worth)")
		fs.IntVar(&f.maxRunning, "max-running", 0, "cap on the RUNNING tasks of every queue naming the limit, together")
	case "show", "delete":
	default:
		return usagef("unknown limits command %q\n%s", sub, limitsUsage)
	}
	positional, done, err := parseArgs(fs, args[1:], nargs, limitsUsage)
	if done || err != nil {
		return err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	c, err := client.New(f.url, client.WithUserAgent("taskmaster-cli/1"), client.WithAPIKey(io.Getenv(client.EnvAPIKey)))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	var limits []client.Limit
	switch sub {
	case "list":
		limits, err = c.Limits(ctx)
	case "show":
		var l *client.Limit
		if l, err = c.Limit(ctx, positional[0]); l != nil {
			limits = []client.Limit{*l}
		}
	case "set":
		var p client.LimitParams
		if p, err = f.params(); err != nil {
			return err
		}
		var l *client.Limit
		if l, _, err = c.PutLimit(ctx, positional[0], p); l != nil {
			limits = []client.Limit{*l}
		}
	case "delete":
		var l *client.Limit
		if l, err = c.DeleteLimit(ctx, positional[0]); l != nil {
			limits = []client.Limit{*l}
		}
	}
	if err != nil {
		var u *usageError
		if errors.As(err, &u) {
			return err
		}
		return &plainError{err: err}
	}
	if f.json {
		if sub == "list" {
			return printJSON(io.Stdout, map[string]any{"limits": nonNil(limits)})
		}
		return printJSON(io.Stdout, limits[0])
	}
	tw := table(io.Stdout)
	fmt.Fprintln(tw, "LIMIT\tRATE\tMAX RUNNING\tRUNNING\tTOKENS\tQUEUES")
	for _, l := range limits {
		rate, maxRunning, tokens := "-", "-", "-"
		if l.PerSecond != nil {
			rate = fmt.Sprintf("%s/s burst %d", strconv.FormatFloat(*l.PerSecond, 'f', -1, 64), *l.Burst)
		}
		if l.MaxRunning != nil {
			maxRunning = strconv.Itoa(*l.MaxRunning)
		}
		if l.Tokens != nil {
			tokens = strconv.FormatFloat(*l.Tokens, 'f', 1, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", l.Name, rate, maxRunning, l.Running, tokens, orDash(strings.Join(l.Queues, ",")))
	}
	return tw.Flush()
}

// params is the limit `limits set` asks for.
func (f limitsFlags) params() (client.LimitParams, error) {
	var p client.LimitParams
	if !f.set["rate"] && !f.set["max-running"] {
		return p, usagef("limits set: name --rate, --max-running, or both\n%s", limitsUsage)
	}
	if f.set["burst"] && !f.set["rate"] {
		return p, usagef("--burst needs --rate")
	}
	if f.set["rate"] {
		perSecond, err := parseRate(f.rate)
		if err != nil {
			return p, err
		}
		p.PerSecond = &perSecond
		if f.set["burst"] {
			p.Burst = &f.burst
		}
	}
	if f.set["max-running"] {
		p.MaxRunning = &f.maxRunning
	}
	return p, nil
}
