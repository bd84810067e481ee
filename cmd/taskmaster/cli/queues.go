package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
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
                             [--max-running-per-group N|none] [--rate-per-group R/s|none]
                             [--burst-per-group N] [--limits NAME,...|none]
                             [--push-url URL|none] [--push-timeout SECONDS] [--push-max-in-flight N]
                             [--push-header 'Name: value' ...|none] [--push-non-retryable 400,404,...|default]
                             [--rotate-secret [--secret-overlap 24h]] [--json]
  taskmaster queue purge QUEUE [--status PENDING|DEAD] [--dry-run] [--wait] [--json]

GLOB matches queue names with * (any characters) and ? (one character).
A paused queue accepts tasks but hands none out until resumed. --rate caps
the claims per second across every instance (a token bucket holding --burst
tokens, by default one second's worth); "none" clears a limit. A queue
without tasks may have settings: they apply to its first task.
--rate-per-group gives each group_key a bucket of its own; --limits names
the named limits the queue draws on (taskmaster limits).

--push-url makes the queue a push queue: the server POSTs each task to the
URL (whose host TASKMASTER_PUSH_ALLOWED_HOSTS must allow) instead of
workers claiming it; "none" turns push off. The signing secret is printed
once, when push is turned on or --rotate-secret asks for a new one (the
old one keeps signing for --secret-overlap, default 24h). Headers are
secret: the server shows their names only.`

type queueFlags struct {
	url                           string
	asJSON                        bool
	prefix, pattern, cursor       string
	minPending                    int64
	paused                        bool
	limit                         int
	maxRunning, rate, maxPerGroup string
	burst                         int
	ratePerGroup, limits          string
	burstPerGroup                 int
	pushURL, pushNonRetryable     string
	pushTimeout, pushInFlight     int
	pushHeaders                   headerList
	rotateSecret                  bool
	secretOverlap                 time.Duration
	// set names the flags the command line named.
	set map[string]bool
}

// headerList collects repeated --push-header 'Name: value' flags.
type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, "; ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

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
		fs.StringVar(&f.ratePerGroup, "rate-per-group", "", "claims per second of each group_key (50/s, 3000/m), or none")
		fs.IntVar(&f.burstPerGroup, "burst-per-group", 0, "tokens each group's bucket holds (default: one second's worth)")
		fs.StringVar(&f.limits, "limits", "", "the named limits the queue draws on, comma-separated, or none")
		fs.StringVar(&f.pushURL, "push-url", "", "deliver the queue's tasks by POST to this URL, or none to stop")
		fs.IntVar(&f.pushTimeout, "push-timeout", 0, "seconds one delivery may take (1-900)")
		fs.IntVar(&f.pushInFlight, "push-max-in-flight", 0, "deliveries in flight at once across every instance (1-10000)")
		fs.Var(&f.pushHeaders, "push-header", "a static header 'Name: value' every delivery carries (repeatable; replaces them all), or none")
		fs.StringVar(&f.pushNonRetryable, "push-non-retryable", "", "statuses that dead-letter at once, comma-separated, or default")
		fs.BoolVar(&f.rotateSecret, "rotate-secret", false, "create a new signing secret (printed once)")
		fs.DurationVar(&f.secretOverlap, "secret-overlap", 24*time.Hour, "with --rotate-secret: how long the old secret keeps signing")
	case "show", "pause", "resume":
	default:
		return usagef("unknown queue command %q\n%s", sub, queueUsage)
	}
	positional, done, err := parseArgs(fs, args[1:], nargs, queueUsage)
	if done || err != nil {
		return err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
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
			if err == nil && out.Push != nil && out.Push.Secret != "" {
				_, err = fmt.Fprintf(io.Stdout, "push signing secret (shown once, keep it): %s\n", out.Push.Secret)
			}
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
	settings := 0
	for name := range f.set {
		if name != "url" && name != "json" {
			settings++
		}
	}
	if settings == 0 {
		return p, usagef("queue set: name at least one setting\n%s", queueUsage)
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
	if err := limit("max-running", f.maxRunning, f.set["max-running"], &p.MaxRunning, &p.ClearMaxRunning); err != nil {
		return p, err
	}
	if err := limit("max-running-per-group", f.maxPerGroup, f.set["max-running-per-group"], &p.MaxRunningPerGroup, &p.ClearMaxRunningPerGroup); err != nil {
		return p, err
	}
	rate := func(rateFlag, burstFlag, v string, burst int, value **client.RateLimit, clear *bool) error {
		switch {
		case f.set[burstFlag] && (!f.set[rateFlag] || v == "none"):
			return usagef("--%s needs --%s", burstFlag, rateFlag)
		case !f.set[rateFlag]:
		case v == "none":
			*clear = true
		default:
			perSecond, err := parseRate(v)
			if err != nil {
				return err
			}
			*value = &client.RateLimit{PerSecond: perSecond, Burst: burst}
		}
		return nil
	}
	if err := rate("rate", "burst", f.rate, f.burst, &p.RateLimit, &p.ClearRateLimit); err != nil {
		return p, err
	}
	if err := rate("rate-per-group", "burst-per-group", f.ratePerGroup, f.burstPerGroup, &p.RateLimitPerGroup, &p.ClearRateLimitPerGroup); err != nil {
		return p, err
	}
	if f.set["limits"] {
		if f.limits == "none" || f.limits == "" {
			p.ClearLimits = true
		} else {
			p.Limits = strings.Split(f.limits, ",")
		}
	}
	return p, f.pushPatch(&p)
}

// pushPatch adds to p the push settings the command line names.
func (f queueFlags) pushPatch(p *client.QueuePatch) error {
	named := false
	for _, name := range []string{"push-url", "push-timeout", "push-max-in-flight", "push-header", "push-non-retryable", "rotate-secret", "secret-overlap"} {
		named = named || f.set[name]
	}
	if !named {
		return nil
	}
	if f.pushURL == "none" {
		if f.set["push-timeout"] || f.set["push-max-in-flight"] || f.set["push-header"] || f.set["push-non-retryable"] || f.set["rotate-secret"] {
			return usagef("--push-url none turns push off: no other --push flag goes with it")
		}
		p.ClearPush = true
		return nil
	}
	if f.set["secret-overlap"] && !f.rotateSecret {
		return usagef("--secret-overlap needs --rotate-secret")
	}
	pp := &client.PushPatch{URL: f.pushURL, TimeoutSeconds: f.pushTimeout, MaxInFlight: f.pushInFlight, RotateSecret: f.rotateSecret}
	if f.rotateSecret {
		overlap := f.secretOverlap
		pp.SecretOverlap = &overlap
	}
	if f.set["push-header"] {
		if len(f.pushHeaders) == 1 && f.pushHeaders[0] == "none" {
			pp.ClearHeaders = true
		} else {
			pp.Headers = map[string]string{}
			for _, h := range f.pushHeaders {
				name, value, ok := strings.Cut(h, ":")
				if !ok || strings.TrimSpace(name) == "" {
					return usagef("--push-header: %q is not 'Name: value'", h)
				}
				pp.Headers[strings.TrimSpace(name)] = strings.TrimSpace(value)
			}
		}
	}
	if f.set["push-non-retryable"] {
		if f.pushNonRetryable == "default" {
			pp.DefaultNonRetryable = true
		} else {
			pp.NonRetryableStatuses = []int{}
			for _, v := range strings.Split(f.pushNonRetryable, ",") {
				if v = strings.TrimSpace(v); v == "" {
					continue
				}
				n, err := strconv.Atoi(v)
				if err != nil {
					return usagef("--push-non-retryable: %q is not a status", v)
				}
				pp.NonRetryableStatuses = append(pp.NonRetryableStatuses, n)
			}
		}
	}
	p.Push = pp
	return nil
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
	if f.set["min-pending"] {
		p.MinPending = &f.minPending
	}
	if f.set["paused"] {
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
	if p := d.Settings.Push; p != nil {
		fmt.Fprintf(tw, "push\t%s; headers %s; non-retryable %v; secret rotated %s\n", p.URL, orDash(strings.Join(p.HeaderNames, ", ")),
			p.NonRetryableStatuses, when(&p.SecretRotatedAt))
	}
	if dl := d.Deliveries; dl != nil {
		fmt.Fprintf(tw, "deliveries\tin flight %d; last %d: %s; p50 %.0fms, p99 %.0fms\n", dl.InFlight, dl.Recent,
			statusCounts(dl.Statuses), dl.LatencyMillis["p50"], dl.LatencyMillis["p99"])
	}
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
	if r := s.RateLimitPerGroup; r != nil {
		parts = append(parts, fmt.Sprintf("rate per group %s/s burst %d", strconv.FormatFloat(r.PerSecond, 'f', -1, 64), r.Burst))
	}
	if len(s.Limits) > 0 {
		parts = append(parts, "limits "+strings.Join(s.Limits, ","))
	}
	if p := s.Push; p != nil {
		host := p.URL
		if u, err := url.Parse(p.URL); err == nil {
			host = u.Host
		}
		parts = append(parts, fmt.Sprintf("push to %s (timeout %ds, max in flight %d)", host, p.TimeoutSeconds, p.MaxInFlight))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// statusCounts is "200 ×95, 500 ×3, none ×2", the most frequent first.
func statusCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return orDash(strings.Join(parts, ", "))
}
