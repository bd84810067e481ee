package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/taskmaster/taskmaster/client"
)

func runWorkers(ctx context.Context, e *env, _ []string) error {
	ws, err := e.client.Workers(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.Stdout, map[string]any{"workers": nonNil(ws)})
	}
	tw := table(e.Stdout)
	fmt.Fprintln(tw, "ID\tSTATUS\tQUEUES\tTAGS\tREGISTERED\tLAST HEARTBEAT")
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, workerStatusText(w), orText(strings.Join(w.Queues, ","), "(any)"),
			orDash(strings.Join(w.Tags, ",")), when(&w.RegisteredAt), when(&w.LastHeartbeatAt))
	}
	return tw.Flush()
}

func runDrain(ctx context.Context, e *env, args []string) error {
	w, err := e.client.Drain(ctx, args[0])
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.Stdout, w)
	}
	_, err = fmt.Fprintf(e.Stdout, "%s %s: claims no more tasks until it registers again\n", w.ID, workerStatusText(*w))
	return err
}

func workerStatusText(w client.Worker) string {
	if w.Draining {
		return string(w.Status) + " (draining)"
	}
	return string(w.Status)
}

func runQueues(ctx context.Context, e *env, _ []string) error {
	qs, err := e.client.Queues(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.Stdout, map[string]any{"queues": nonNil(qs)})
	}
	tw := table(e.Stdout)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tRUNNING\tDONE\tDEAD\tBLOCKED\tACTIVE WORKERS\tOLDEST PENDING\tDONE/MIN (5M)")
	var asOf *time.Time
	for _, q := range qs {
		age := "-"
		if d, ok := q.OldestPendingAge(); ok {
			age = d.Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.1f\n", q.Queue, q.Pending, q.Running, q.Done, q.Dead, q.Blocked, q.ActiveWorkers,
			age, q.Rates[client.RateLast5m].Completed)
		if q.StatsAsOf != nil && (asOf == nil || q.StatsAsOf.After(*asOf)) {
			asOf = q.StatsAsOf
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if asOf != nil {
		// The counts are a projection of the lifecycle events: say how fresh.
		_, err = fmt.Fprintf(e.Stdout, "statistics as of %s\n", when(asOf))
	}
	return err
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
