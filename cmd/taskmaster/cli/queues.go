package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/taskmaster/taskmaster/client"
)

// `taskmaster queue list|show|pause|resume|set|purge` reads and steers the queues
// of a server (--url, $TASKMASTER_URL) with the API key in
// $TASKMASTER_API_KEY (read to look, admin to change).

const queueUsage = `usage:
  taskmaster queue list [--prefix P] [--pattern GLOB] [--min-pending N] [--paused | --paused=false]
                        [--limit N] [--cursor C] [--json]
  taskmaster queue show QUEUE [--json]
  taskmaster queue pause QUEUE [--json]
  taskmaster queue resume QUEUE [--json]
  taskmaster queue set QUEUE [--max-running N|none] [--rate R/s|R/m|none] [--burst N]
                             [--max-running-per-group N|none] [--json]
  taskmaster queue purge QUEUE [--status PENDING|DEAD] [--dry-run] [--wait] [--json]

GLOB matches queue names with * (any characters) and ? (one character).
A paused queue accepts tasks but hands none out until resumed. --rate caps
the claims per second across every instance (a token bucket holding --burst
tokens, by default one second's worth); "none" clears a limit. A queue
without tasks may have settings: they apply to its first task.`

type queueFlags struct {
	url                           string
	asJSON                        bool
	prefix, pattern, cursor       string
	minPending                    int64
	paused                        bool
	limit                         int
	maxRunning, rate, maxPerGroup string
	burst                         int
	// set* say which flags the command line named.
	setPaused, setMin, setBurst    bool
	setMaxRunning, setRate, setMPG bool
}

// runQueue runs `taskmaster queue SUBCOMMAND ...`.
func runQueue(ctx context.Context, args []string, io IO) error {
	sub, fs, done, err := subcommand("queue", queueUsage, args, io)
	if done {
		return err
	}
	if sub == "purge" {
		return runQueuePurge(ctx, args[1:], io)
	}
	var f queueFlags
	fs.StringVar(&f.url, "url", defaultURL(io), "Taskmaster base URL (env TASKMASTER_URL)")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
	nargs := 1
	switch sub {
	case "list":
		nargs = 0
		fs.StringVar(&f.prefix, "prefix", "", "only queues whose names start with this")
		fs.StringVar(&f.pattern, "pattern", "", "only queues whose names match this glob (* any characters, ? one)")
		fs.Int64Var(&f.minPending, "min-pending", 0, "only queues with at least this many PENDING tasks")
		fs.BoolVar(&f.paused, "paused", false, "only paused queues (--paused=false: only the others)")
		fs.IntVar(&f.limit, "limit", 0, "page size, 1-1000 (default 100)")
		fs.StringVar(&f.cursor, "cursor", "", "continue a listing where the previous page ended")
	case "set":
		fs.StringVar(&f.maxRunning, "max-running", "", "cap on the queue's RUNNING tasks across all workers, or none")
		fs.StringVar(&f.rate, "rate", "", "claims per second (50/s, 50, 3000/m), or none")
		fs.IntVar(&f.burst, "burst", 0, "tokens the rate limit's bucket holds (default: one second's worth)")
		fs.StringVar(&f.maxPerGroup, "max-running-per-group", "", "cap on the RUNNING tasks of each group_key, or none")
	case "show", "pause", "resume":
	default:
		return usagef("unknown queue command %q\n%s", sub, queueUsage)
	}
	positional, done, err := parseArgs(fs, args[1:], nargs, queueUsage)
	if done || err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "paused":
			f.setPaused = true
		case "min-pending":
			f.setMin = true
		case "burst":
			f.setBurst = true
		case "max-running":
			f.setMaxRunning = true
		case "rate":
			f.setRate = true
		case "max-running-per-group":
			f.setMPG = true
		}
	})
	c, err := client.New(f.url, client.WithUserAgent("taskmaster-cli/1"), client.WithAPIKey(io.Getenv(client.EnvAPIKey)))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	switch sub {
	case "list":
		err = queueList(ctx, c, f, io)
	case "show":
		err = queueShow(ctx, c, positional[0], f, io)
	default:
		var patch client.QueuePatch
		switch sub {
		case "pause", "resume":
			paused := sub == "pause"
			patch.Paused = &paused
		case "set":
			if patch, err = f.patch(); err != nil {
				return err
			}
		}
		var out *client.QueueSettingsResult
		if out, err = c.UpdateQueue(ctx, positional[0], patch); err == nil {
			if f.asJSON {
				return printJSON(io.Stdout, out)
			}
			_, err = fmt.Fprintf(io.Stdout, "queue %s: %s\n", out.Queue, settingsText(out.QueueSettings))
		}
	}
	if err != nil {
		var u *usageError
		if errors.As(err, &u) {
			return err
		}
		return &plainError{err: err}
	}
	return nil
}

// patch is the change `queue set` asks for.
func (f queueFlags) patch() (client.QueuePatch, error) {
	var p client.QueuePatch
	if !f.setMaxRunning && !f.setRate && !f.setMPG {
		return p, usagef("queue set: name at least one of --max-running, --rate, --max-running-per-group\n%s", queueUsage)
	}
	limit := func(name, v string, set bool, value **int, clear *bool) error {
		if !set {
			return nil
		}
		if v == "none" {
			*clear = true
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return usagef("--%s: %q is neither an integer nor none", name, v)
		}
		*value = &n
		return nil
	}
	if err := limit("max-running", f.maxRunning, f.setMaxRunning, &p.MaxRunning, &p.ClearMaxRunning); err != nil {
		return p, err
	}
	if err := limit("max-running-per-group", f.maxPerGroup, f.setMPG, &p.MaxRunningPerGroup, &p.ClearMaxRunningPerGroup); err != nil {
		return p, err
	}
	switch {
	case f.setBurst && (!f.setRate || f.rate == "none"):
		return p, usagef("--burst needs --rate")
	case !f.setRate:
	case f.rate == "none":
		p.ClearRateLimit = true
	default:
		perSecond, err := parseRate(f.rate)
		if err != nil {
			return p, err
		}
		p.RateLimit = &client.RateLimit{PerSecond: perSecond, Burst: f.burst}
	}
	return p, nil
}

// parseRate reads "50/s", "50" (per second) or "3000/m" as tasks per second.
func parseRate(v string) (float64, error) {
	num, unit, _ := strings.Cut(v, "/")
	per := time.Second
	switch unit {
	case "", "s":
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		return 0, usagef("--rate: %q: the unit is /s, /m or /h", v)
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, usagef("--rate: %q is not a rate such as 50/s, or none", v)
	}
	return n / per.Seconds(), nil
}

func queueList(ctx context.Context, c *client.Client, f queueFlags, io IO) error {
	p := client.ListQueuesParams{Prefix: f.prefix, Pattern: f.pattern, Limit: f.limit, Cursor: f.cursor}
	if f.setMin {
		p.MinPending = &f.minPending
	}
	if f.setPaused {
		p.Paused = &f.paused
	}
	page, err := c.ListQueues(ctx, p)
	if err != nil {
		return err
	}
	if f.asJSON {
		var next *string
		if page.NextCursor != "" {
			next = &page.NextCursor
		}
		return printJSON(io.Stdout, map[string]any{"queues": nonNil(page.Queues), "next_cursor": next})
	}
	tw := table(io.Stdout)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tRUNNING\tDONE\tDEAD\tBLOCKED\tACTIVE WORKERS\tOLDEST PENDING\tSETTINGS")
	for _, q := range page.Queues {
		age := "-"
		if d, ok := q.OldestPendingAge(); ok {
			age = d.Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", q.Queue, q.Pending, q.Running, q.Done, q.Dead, q.Blocked,
			q.ActiveWorkers, age, settingsText(q.Settings))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		_, err = fmt.Fprintf(io.Stdout, "more: taskmaster queue list --cursor %s (with the same filters)\n", page.NextCursor)
	}
	return err
}

func queueShow(ctx context.Context, c *client.Client, name string, f queueFlags, io IO) error {
	d, err := c.Queue(ctx, name)
	if err != nil {
		return err
	}
	if f.asJSON {
		return printJSON(io.Stdout, d)
	}
	seconds := func(m map[string]*float64, k string) string {
		if v := m[k]; v != nil {
			return strconv.FormatFloat(*v, 'f', 3, 64) + "s"
		}
		return "-"
	}
	age := "-"
	if a, ok := d.OldestPendingAge(); ok {
		age = a.Round(time.Second).String()
	}
	tw := table(io.Stdout)
	fmt.Fprintf(tw, "queue\t%s\n", d.Queue.Queue)
	fmt.Fprintf(tw, "settings\t%s\n", settingsText(d.Settings))
	fmt.Fprintf(tw, "tasks\tpending %d, running %d, done %d, dead %d, blocked %d\n", d.Pending, d.Running, d.Done, d.Dead, d.Blocked)
	fmt.Fprintf(tw, "leased now\t%d\n", d.Leased)
	fmt.Fprintf(tw, "active workers\t%d\n", d.ActiveWorkers)
	fmt.Fprintf(tw, "oldest pending\t%s\n", age)
	for _, w := range []string{client.RateLast5m, client.RateLast15m} {
		r := d.Rates[w]
		fmt.Fprintf(tw, "%s\tenqueued %.1f/min, claimed %.1f/min, completed %.1f/min; avg execution %s, avg queue wait %s\n",
			strings.TrimPrefix(w, "last_"), r.Enqueued, r.Claimed, r.Completed,
			seconds(d.AvgExecutionSeconds, w), seconds(d.AvgQueueWaitSeconds, w))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.LeasedSample) == 0 {
		return nil
	}
	fmt.Fprintln(io.Stdout)
	tw = table(io.Stdout)
	fmt.Fprintln(tw, "LEASED TASK\tWORKER\tCLAIMED\tLEASE EXPIRES")
	for _, t := range d.LeasedSample {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.WorkerID, when(&t.ClaimedAt), when(&t.LeaseExpiresAt))
	}
	return tw.Flush()
}

// settingsText is a queue's settings in a few words.
func settingsText(s client.QueueSettings) string {
	var parts []string
	if s.Paused {
		parts = append(parts, "paused")
	}
	if s.MaxRunning != nil {
		parts = append(parts, fmt.Sprintf("max running %d", *s.MaxRunning))
	}
	if r := s.RateLimit; r != nil {
		parts = append(parts, fmt.Sprintf("rate %s/s burst %d", strconv.FormatFloat(r.PerSecond, 'f', -1, 64), r.Burst))
	}
	if s.MaxRunningPerGroup != nil {
		parts = append(parts, fmt.Sprintf("max running per group %d", *s.MaxRunningPerGroup))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
