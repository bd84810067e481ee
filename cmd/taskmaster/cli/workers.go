package cli

import (
	"context"
	"fmt"
	"strings"
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.Status, orText(strings.Join(w.Queues, ","), "(any)"),
			orDash(strings.Join(w.Tags, ",")), when(&w.RegisteredAt), when(&w.LastHeartbeatAt))
	}
	return tw.Flush()
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
	fmt.Fprintln(tw, "QUEUE\tPENDING\tRUNNING\tDONE\tDEAD\tACTIVE WORKERS")
	for _, q := range qs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", q.Queue, q.Pending, q.Running, q.Done, q.Dead, q.ActiveWorkers)
	}
	return tw.Flush()
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
