package sandbox

import (
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/runtime"
)

// capture reads a stream, keeping at most limit bytes; past the limit it
// calls over once and drops the rest, so a flood never grows the daemon's
// memory beyond the cap.
type capture struct {
	limit     int64
	buf       []byte
	truncated bool
	over      func()
}

// chunks are capture's read buffers, reused: a fresh one for each of a
// job's streams was most of what a job allocated.
var chunks = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (c *capture) readFrom(r io.Reader) {
	buf := chunks.Get().(*[32 << 10]byte)
	defer chunks.Put(buf)
	chunk := buf[:]
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			room := c.limit - int64(len(c.buf))
			if int64(n) > room {
				if room > 0 {
					c.buf = append(c.buf, chunk[:room]...)
				}
				if !c.truncated {
					c.truncated = true
					c.over()
				}
			} else {
				c.buf = append(c.buf, chunk[:n]...)
			}
		}
		if err != nil {
			return
		}
	}
}

// proc is a running step as supervise sees it: a container (ctrProc), or
// a stub in a reusable sandbox (boxProc).
type proc interface {
	// kill kills the step's every process.
	kill()
	// wait returns how the step's first process ended, once the rest is
	// killed too.
	wait() (runtime.ExitStatus, error)
	stats() (runtime.Stats, error)
}

// ctrProc is a step that is a container's init.
type ctrProc struct {
	rt Runtime
	id string
}

func (p ctrProc) kill()                             { p.rt.Signal(p.id, syscall.SIGKILL) }
func (p ctrProc) wait() (runtime.ExitStatus, error) { return p.rt.Wait(context.Background(), p.id) }
func (p ctrProc) stats() (runtime.Stats, error)     { return p.rt.Stats(p.id) }

// supervise streams a running step's output into res and enforces its wall
// time, CPU time and output limits, and cancellation, by killing the
// step; it returns once the step has ended and the streams are closed.
func (s *Sandbox) supervise(ctx context.Context, pr proc, l jobs.Limits, outR, errR *os.File, res *jobs.StepResult) (stepEnd, runtime.ExitStatus, error) {
	var mu sync.Mutex
	var end stepEnd
	kill := func(set func(*stepEnd)) {
		mu.Lock()
		set(&end)
		mu.Unlock()
		pr.kill()
	}
	overflow := func() { kill(func(e *stepEnd) { e.output = true }) }
	out := &capture{limit: l.OutputBytes, over: overflow}
	errc := &capture{limit: l.OutputBytes, over: overflow}
	var streams sync.WaitGroup
	streams.Add(2)
	go func() { defer streams.Done(); out.readFrom(outR); outR.Close() }()
	go func() { defer streams.Done(); errc.readFrom(errR); errR.Close() }()

	type waited struct {
		st  runtime.ExitStatus
		err error
	}
	done := make(chan waited, 1)
	go func() {
		st, err := pr.wait()
		done <- waited{st, err}
	}()
	clk := s.clock()
	wall := clk.NewTimer(l.Timeout)
	defer wall.Stop()
	every := s.CPUCheck
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	cpuLimit := l.CPUTimeLimit()
	tick := clk.NewTimer(every)
	defer tick.Stop()
	cancelled := ctx.Done()
	var w waited
loop:
	for {
		select {
		case w = <-done:
			break loop
		case <-wall.C():
			kill(func(e *stepEnd) { e.timeout = true })
		case <-tick.C():
			if st, err := pr.stats(); err == nil && time.Duration(st.CPUUsageNs) >= cpuLimit {
				kill(func(e *stepEnd) { e.cpu = true })
			} else {
				tick.Reset(every)
			}
		case <-cancelled:
			cancelled = nil
			kill(func(e *stepEnd) { e.cancelled = true })
		}
	}
	// The step is gone (a container's init, and so the kernel has killed
	// the rest of its pid namespace; or a stub, whose cgroup wait killed),
	// so the pipes close; streams still open after a grace period (held by
	// a process that outlived the kill) are read no further.
	streamsDone := make(chan struct{})
	go func() { streams.Wait(); close(streamsDone) }()
	select {
	case <-streamsDone:
	case <-time.After(2 * time.Second):
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
		<-streamsDone
	}
	res.Stdout, res.StdoutTruncated = strings.ToValidUTF8(string(out.buf), "\uFFFD"), out.truncated
	res.Stderr, res.StderrTruncated = strings.ToValidUTF8(string(errc.buf), "\uFFFD"), errc.truncated
	mu.Lock()
	defer mu.Unlock()
	return end, w.st, w.err
}
