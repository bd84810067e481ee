// Package binary builds the real `taskmaster` binary and runs `taskmaster
// serve` processes for end-to-end tests that need a process of their own:
// one that can be killed, frozen (SIGSTOP) and thawed (SIGCONT).
package binary

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startTimeout bounds a start, on a loaded machine with the race detector.
const startTimeout = 90 * time.Second

// Build builds cmd/taskmaster into a temporary directory of the test, with
// the race detector when the tests run with it (its packages are then
// already compiled), and returns the binary's path.
func Build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "taskmaster")
	args := []string{"build", "-o", bin}
	if RaceEnabled {
		args = append(args, "-race")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.Command(gocmd, append(args, "github.com/taskmaster/taskmaster/cmd/taskmaster")...).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// Process is one `taskmaster serve`.
type Process struct {
	// URL is its API's base URL.
	URL  string
	cmd  *exec.Cmd
	out  *lines
	done chan struct{}
}

// Serve starts bin serve with env (TASKMASTER_* settings; the HTTP address
// is chosen by the process, the log format is JSON) and waits until it is
// ready. With TASKMASTER_TLS_CERT_FILE in env, URL is https. The process is stopped when the test ends.
func Serve(t testing.TB, bin string, env ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"TASKMASTER_HTTP_ADDR=127.0.0.1:0",
		"TASKMASTER_LOG_FORMAT=json",
	}, env...)
	out := &lines{}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	p := &Process{cmd: cmd, out: out, done: make(chan struct{})}
	addr := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		out.read(stdout, func(entry map[string]any) {
			if entry["msg"] == "http server listening" {
				if a, ok := entry["addr"].(string); ok {
					select {
					case addr <- a:
					default:
					}
				}
			}
		})
	}()
	go func() {
		<-copied // Wait closes the pipe: read it to the end first
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.Stop(t) })
	scheme, hc := "http", http.DefaultClient
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "TASKMASTER_TLS_CERT_FILE=") }) {
		// Serving HTTPS: readiness is probed without verifying the
		// certificate, which is the caller's to check.
		scheme = "https"
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness only
	}
	select {
	case a := <-addr:
		p.URL = scheme + "://" + a
	case <-p.done:
		t.Fatalf("taskmaster serve exited while starting:\n%s", out)
	case <-time.After(startTimeout):
		t.Fatalf("taskmaster serve did not start:\n%s", out)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := hc.Get(p.URL + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		require.False(t, time.Now().After(deadline), "not ready:\n%s", out)
		time.Sleep(20 * time.Millisecond)
	}
}

// Start runs bin with args and env (PATH is added) as its whole
// environment, its standard output and error captured together (Output).
// It does not wait for anything; a process still running when the test ends
// is killed (SIGKILL, after SIGCONT).
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	p := &Process{cmd: cmd, out: &lines{}, done: make(chan struct{})}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		p.out.read(stdout, func(map[string]any) {})
	}()
	go func() {
		<-copied
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Exited returns a channel closed once the process has exited (and its
// output was read to the end).
func (p *Process) Exited() <-chan struct{} { return p.done }

// ExitCode returns the exit code of a process that has exited, -1 when a
// signal ended it.
func (p *Process) ExitCode() int { return p.cmd.ProcessState.ExitCode() }

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Process) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// Output returns everything the process wrote so far.
func (p *Process) Output() string { return p.out.String() }

// Logged returns the JSON log entries whose msg is msg.
func (p *Process) Logged(msg string) []map[string]any { return p.out.entries(msg) }

// Stop ends the process gracefully (thawing it first, in case it is
// frozen), or kills it after 30 s; calling it again does nothing.
func (p *Process) Stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("taskmaster serve did not stop on SIGTERM:\n%s", p.out)
	}
}

// lines is a process's output, line by line, safe to read while it grows.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) read(r io.Reader, each func(map[string]any)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		l.mu.Lock()
		l.all = append(l.all, line)
		l.mu.Unlock()
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil {
			each(entry)
		}
	}
	_, _ = io.Copy(io.Discard, r) // past a line too long to keep, never block the writer
}

func (l *lines) entries(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range l.all {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == msg {
			out = append(out, entry)
		}
	}
	return out
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}
