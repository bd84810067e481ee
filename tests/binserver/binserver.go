// Package binserver builds the taskmaster binary and runs `taskmaster serve`
// processes, for the end-to-end tests that need the real binary: a SIGKILL
// in the middle of claims (tests/crash), a database restart under load
// (tests/outage).
package binserver

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Timeouts of Serve and Stop.
const (
	// ReadyTimeout bounds how long Serve waits for /readyz to answer 200.
	ReadyTimeout = 90 * time.Second
	// StopTimeout bounds how long Stop waits after SIGTERM before SIGKILL.
	StopTimeout = 30 * time.Second
)

// Build builds cmd/taskmaster into a temporary directory and returns the
// binary's path. It builds with the race detector when the tests run with
// it (its packages are then already compiled).
func Build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "taskmaster")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	cmd := exec.Command(gocmd, append(args, "github.com/taskmaster/taskmaster/cmd/taskmaster")...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Process is one `taskmaster serve` process.
type Process struct {
	// Addr is the address it listens on; URL is http://Addr.
	Addr, URL string

	cmd     *exec.Cmd
	out     *lockedBuffer
	exited  chan struct{} // closed once the process has exited and been reaped
	waitErr error         // read only after exited is closed
}

// Serve starts `bin serve` on addr with the given settings ("NAME=value";
// PATH is passed on, nothing else of the environment) and waits until
// /readyz answers 200. The process is stopped when the test ends, unless it
// was already.
func Serve(t testing.TB, bin, addr string, env ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "TASKMASTER_HTTP_ADDR=" + addr}, env...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	p := &Process{Addr: addr, URL: "http://" + addr, cmd: cmd, out: out, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.Stop(t) })
	deadline := time.Now().Add(ReadyTimeout)
	for {
		resp, err := http.Get(p.URL + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.exited:
			require.FailNow(t, "server exited before it was ready", "%v\n%s", p.waitErr, out)
		default:
		}
		require.False(t, time.Now().After(deadline), "server not ready after %v:\n%s", ReadyTimeout, out)
		time.Sleep(20 * time.Millisecond) // the pace of the readiness poll
	}
}

// Output returns what the process wrote so far.
func (p *Process) Output() string { return p.out.String() }

// Kill ends the process with SIGKILL (no shutdown hook runs) and checks
// that it died of it.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.exited
	var exit *exec.ExitError
	require.ErrorAs(t, p.waitErr, &exit)
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
}

// Stop ends the process gracefully (SIGTERM), if it still runs, and fails
// the test when it does not exit within StopTimeout or exits with an error.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("SIGTERM: %v", err)
	}
	select {
	case <-p.exited:
		if p.waitErr != nil {
			t.Errorf("server stopped: %v\n%s", p.waitErr, p.out)
		}
	case <-time.After(StopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("server did not stop within %v of SIGTERM:\n%s", StopTimeout, p.out)
	}
}

// lockedBuffer is a bytes.Buffer that the process's output goroutine and
// the test may use at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
