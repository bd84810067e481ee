package cli

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/taskmaster/taskmaster/client"
)

// progressFD is the file descriptor on which an --exec command reports
// progress: lines "progress <percent> <message>" (the message may be
// empty; other lines are ignored).
const progressFD = 3

// progressPipe reads a command's progress lines and reports the latest to
// the server, one report at a time: the command never waits for the
// server (the reader keeps reading while a report is sent, and a report
// that comes while another is in flight replaces the one waiting).
type progressPipe struct {
	r, w *os.File
	t    client.Task
	ctx  context.Context

	mu      sync.Mutex
	latest  *progressLine
	wake    chan struct{}
	done    chan struct{}
	readers sync.WaitGroup
}

type progressLine struct {
	percent float64
	message string
}

func newProgressPipe(ctx context.Context, t client.Task) (*progressPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p := &progressPipe{r: r, w: w, t: t, ctx: ctx, wake: make(chan struct{}, 1), done: make(chan struct{})}
	p.readers.Add(2)
	go p.read()
	go p.send()
	return p, nil
}

// close stops reading (a descendant of the command may still hold the
// write end open) and waits for the last report to be sent.
func (p *progressPipe) close() {
	_ = p.r.Close()
	close(p.done)
	p.readers.Wait()
}

// parseProgress reads "progress <percent> <message>".
func parseProgress(line string) (progressLine, bool) {
	rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "progress ")
	if !ok {
		return progressLine{}, false
	}
	num, msg, _ := strings.Cut(strings.TrimLeft(rest, " "), " ")
	pct, err := strconv.ParseFloat(num, 64)
	if err != nil || pct < 0 || pct > 100 {
		return progressLine{}, false
	}
	return progressLine{percent: pct, message: msg}, true
}

func (p *progressPipe) read() {
	defer p.readers.Done()
	sc := bufio.NewScanner(p.r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		l, ok := parseProgress(sc.Text())
		if !ok {
			continue
		}
		p.mu.Lock()
		p.latest = &l
		p.mu.Unlock()
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func (p *progressPipe) send() {
	defer p.readers.Done()
	for {
		select {
		case <-p.wake:
		case <-p.done:
			// The last line read before the command ended.
			select {
			case <-p.wake:
				p.report()
			default:
			}
			return
		}
		p.report()
	}
}

func (p *progressPipe) report() {
	p.mu.Lock()
	l := p.latest
	p.latest = nil
	p.mu.Unlock()
	if l == nil || p.ctx.Err() != nil {
		return
	}
	// A refused report (the task is no longer this worker's) changes
	// nothing: the runner learns it from its heartbeats.
	_ = p.t.Progress(p.ctx, l.percent, l.message)
}
