package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/taskmaster/taskmaster/client"
)

func Example_producer() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	task, err := c.Submit(ctx, client.SubmitParams{
		Queue:          "emails",
		Payload:        map[string]string{"to": "a@example.com"},
		MaxAttempts:    5,
		IdempotencyKey: "welcome-42", // a resubmission returns the same task
	})
	if err != nil {
		log.Fatal(err)
	}
	task, err = c.Get(ctx, task.ID)
	if client.IsNotFound(err) {
		log.Fatal("gone")
	}
	fmt.Println(task.Status)
}

func Example_runner() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	r, err := client.NewRunner(c, client.RunnerConfig{
		Queues:       []string{"emails"},
		Concurrency:  8,
		DrainTimeout: 30 * time.Second,
	}, func(ctx context.Context, t client.Task) (any, error) {
		var p struct{ To string }
		if err := t.DecodePayload(&p); err != nil {
			return nil, client.NonRetryable(err) // straight to DEAD
		}
		if p.To == "" {
			return nil, client.NonRetryable(errors.New("no recipient"))
		}
		// ... send, honouring ctx ...
		return map[string]string{"sent_to": p.To}, nil // completes the task
	})
	if err != nil {
		log.Fatal(err)
	}
	// Until SIGINT/SIGTERM, then a graceful drain.
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A push queue's endpoint: verify the signature over the raw body with the
// secret the queue's PATCH showed, then deduplicate on the task id
// (delivery is at least once) and answer 2xx to complete the task.
func ExampleVerifySignature() {
	secret := "tmpush_..." // from UpdateQueue's answer, kept in your secret store
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "unreadable", http.StatusBadRequest)
			return
		}
		if err := client.VerifySignature(secret, r.Header.Get(client.HeaderSignature), body, 0); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized) // 401: non-retryable by default
			return
		}
		taskID := r.Header.Get(client.HeaderTaskID) // the same on a repeated delivery
		_ = taskID
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"done":true}`) // becomes the task's result
	}
	http.HandleFunc("/hooks/emails", handler)
}
