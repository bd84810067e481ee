// Command taskmaster is the Taskmaster service.
//
//	taskmaster serve     run the API (and the background services)
//	taskmaster migrate   apply database migrations and exit
//	taskmaster bench     measure throughput and latency (see docs/performance.md)
//	taskmaster outbox poison list|replay|discard
//	                     the outbox messages the projections set aside
//	                     (see docs/operations.md)
//	taskmaster dev       start a local PostgreSQL in ./.data (unless
//	                     TASKMASTER_DATABASE_URL is set) and serve
//
// and, as a client of a running server (TASKMASTER_URL, see package cli):
//
//	taskmaster submit|get|list|retry|cancel|workers|queues
//	taskmaster worker --queue Q --exec 'cmd args'
//	taskmaster keys create|list|revoke   (API keys; on the database with
//	                     TASKMASTER_DATABASE_URL, else on the server)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/bench"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "taskmaster:", err)
		var cfgErr *app.ConfigError
		if errors.As(err, &cfgErr) || errors.Is(err, errUsage) || errors.Is(err, cli.ErrUsage) || errors.Is(err, app.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage: taskmaster serve|migrate|dev|bench|outbox|submit|get|list|retry|cancel|workers|queues|worker|keys [flags]  (taskmaster <command> -h lists the flags)")

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return app.Serve(ctx, rest, getenv, stderr)
	case "migrate":
		return app.MigrateCommand(ctx, rest, getenv, stderr)
	case "dev":
		return app.Dev(ctx, rest, getenv, stdout, stderr)
	case "bench":
		return bench.Run(ctx, rest, stdout, stderr)
	case "outbox":
		return app.OutboxCommand(ctx, rest, getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, errUsage.Error())
		return nil
	default:
		if cli.Handles(cmd) {
			return cli.Run(ctx, args, cli.IO{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr, Getenv: getenv})
		}
		return fmt.Errorf("unknown command %q: %w", cmd, errUsage)
	}
}
