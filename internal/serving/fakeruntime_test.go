package serving

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/runtime"
)

// fakeRuntime stands in for runc in the controller's unit tests: its
// containers are records and channels. A container writes one line to its
// stdout when it starts; its writes are stamped with the fake clock.
type fakeRuntime struct {
	mu    sync.Mutex
	ctrs  map[string]*fakeCtr
	pid   int
	clock clock.Clock
	// hook, if set, runs a merge hook container's command: it is called
	// when the container starts, and the container exits with its code.
	hook func(s runtime.Spec) int
	// failRestore makes a restore (Spec.RestoreFrom) fail.
	failRestore bool
	// onRead, if set, runs in a read of CPU counters (CPUUse) before it
	// returns: a slow read.
	onRead func()
}

type fakeCtr struct {
	spec runtime.Spec
	// stdin keeps a copy of a pipe given as its stdin open, as its
	// process would (a premade replica's pid 1 waits on it).
	stdin  *os.File
	pid    int
	frozen bool
	cpu    float64
	// cpuUpdates are the quotas UpdateCPU set, in order.
	cpuUpdates []float64
	// periods and throttled are the cgroup's CFS counters (cpu.stat).
	periods, throttled uint64
	// used is the CPU time its cgroup used (cpuacct.usage).
	used time.Duration
	// reads counts the reads of its counters (Stats).
	reads int
	done  chan struct{}
	// sick makes its health command exit 1; execs counts the commands run.
	sick   bool
	execs  int
	exit   runtime.ExitStatus
	stdout string // the path of its stdout
}

func newFakeRuntime(c clock.Clock) *fakeRuntime {
	return &fakeRuntime{ctrs: map[string]*fakeCtr{}, pid: 1000, clock: c}
}

func (f *fakeRuntime) Run(ctx context.Context, s runtime.Spec) (*runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err) // as runc, which is not started
	}
	if _, ok := f.ctrs[s.ID]; ok {
		return nil, fmt.Errorf("container %q: %w", s.ID, errdefs.ErrConflict)
	}
	if s.RestoreFrom != "" && f.failRestore {
		return nil, fmt.Errorf("container %q: runc restore: criu failed", s.ID)
	}
	f.pid++
	c := &fakeCtr{spec: s, pid: f.pid, cpu: s.Limits.CPUs, done: make(chan struct{})}
	f.ctrs[s.ID] = c
	if in, ok := s.Stdin.(*os.File); ok {
		fd, err := syscall.Dup(int(in.Fd()))
		if err != nil {
			return nil, err
		}
		c.stdin = os.NewFile(uintptr(fd), in.Name())
	}
	if s.Stdout != nil && strings.HasPrefix(s.Stdout.Name(), "|") {
		// A pipe to the node's log writer: no file to stamp.
		fmt.Fprintf(s.Stdout, "%s started\n", s.ID)
	} else if s.Stdout != nil {
		c.stdout = s.Stdout.Name()
		if err := f.stamp(c.stdout, func() error { _, err := fmt.Fprintf(s.Stdout, "%s started\n", s.ID); return err }); err != nil {
			return nil, err
		}
	}
	if s.Labels[labels.Kind] == labels.KindMerge && f.hook != nil {
		c.exit = runtime.ExitStatus{Code: f.hook(s), Known: true}
		close(c.done)
	}
	return &runtime.Container{ID: s.ID, Pid: f.pid, Status: runtime.StatusRunning}, nil
}

// stamp runs write and sets the file's times to the fake clock's.
func (f *fakeRuntime) stamp(path string, write func() error) error {
	if err := write(); err != nil {
		return err
	}
	now := f.clock.Now()
	return os.Chtimes(path, now, now)
}

// write appends data to container id's stdout.
func (f *fakeRuntime) write(id string, data []byte) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	return f.stamp(c.stdout, func() error {
		w, err := os.OpenFile(c.stdout, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

func (f *fakeRuntime) get(id string) (*fakeCtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.ctrs[id]
	if c == nil {
		return nil, fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

func (f *fakeRuntime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	c, err := f.get(id)
	if err != nil {
		return runtime.ExitStatus{}, err
	}
	select {
	case <-c.done:
		return c.exit, nil
	case <-ctx.Done():
		return runtime.ExitStatus{}, ctx.Err()
	}
}

// exit ends container id with code as if its process exited.
func (f *fakeRuntime) exit(id string, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		select {
		case <-c.done:
		default:
			c.exit = runtime.ExitStatus{Code: code, Known: true}
			close(c.done)
		}
	}
}

func (f *fakeRuntime) Stop(_ context.Context, id string, _ time.Duration) (runtime.ExitStatus, error) {
	if _, err := f.get(id); err != nil {
		return runtime.ExitStatus{}, err
	}
	f.exit(id, 128+int(syscall.SIGTERM))
	c, _ := f.get(id)
	return c.exit, nil
}

func (f *fakeRuntime) Delete(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctrs[id] == nil {
		return fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	delete(f.ctrs, id)
	return nil
}

func (f *fakeRuntime) setFrozen(id string, v bool) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	f.mu.Lock()
	c.frozen = v
	f.mu.Unlock()
	return nil
}

func (f *fakeRuntime) Freeze(id string) error { return f.setFrozen(id, true) }

func (f *fakeRuntime) Thaw(id string) error { return f.setFrozen(id, false) }

func (f *fakeRuntime) UpdateCPU(id string, cpus float64) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	f.mu.Lock()
	c.cpu = cpus
	c.cpuUpdates = append(c.cpuUpdates, cpus)
	f.mu.Unlock()
	return nil
}

// work adds CFS periods to container id's counters, throttled of them
// throttled.
func (f *fakeRuntime) work(id string, periods, throttled uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		c.periods += periods
		c.throttled += throttled
	}
}

// use adds CPU time used to container id's counters.
func (f *fakeRuntime) use(id string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		c.used += d
	}
}

// cpu returns container id's quota and the quotas UpdateCPU set.
func (f *fakeRuntime) cpu(id string) (float64, []float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.ctrs[id]
	if c == nil {
		return 0, nil
	}
	return c.cpu, append([]float64(nil), c.cpuUpdates...)
}

func (f *fakeRuntime) Stats(id string) (runtime.Stats, error) {
	c, err := f.get(id)
	if err != nil {
		return runtime.Stats{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c.reads++
	return runtime.Stats{MemoryBytes: 1 << 20, NrPeriods: c.periods, NrThrottled: c.throttled, CPUUsageNs: uint64(c.used)}, nil
}

// reads counts the reads of container id's counters so far.
func (f *fakeRuntime) reads(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		return c.reads
	}
	return 0
}

func (f *fakeRuntime) CPUUse(id string) (runtime.CPUUse, error) {
	st, err := f.Stats(id)
	f.mu.Lock()
	onRead := f.onRead
	f.mu.Unlock()
	if onRead != nil {
		onRead()
	}
	return runtime.CPUUse{Periods: st.NrPeriods, Throttled: st.NrThrottled, Used: time.Duration(st.CPUUsageNs)}, err
}

func (f *fakeRuntime) Get(id string) (*runtime.Container, error) {
	c, err := f.get(id)
	if err != nil {
		return nil, err
	}
	st := runtime.StatusRunning
	if c.frozen {
		st = runtime.StatusPaused
	}
	return &runtime.Container{ID: id, Pid: c.pid, Status: st}, nil
}

// Exec runs a health command: it exits 1 with a line of output when the
// container is sick, else 0.
func (f *fakeRuntime) Exec(_ context.Context, id string, p runtime.ExecSpec) (runtime.ExitStatus, error) {
	c, err := f.get(id)
	if err != nil {
		return runtime.ExitStatus{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c.execs++
	if c.sick {
		fmt.Fprintf(p.Stderr, "%s: no\n", p.Args[0])
		return runtime.ExitStatus{Code: 1, Known: true}, nil
	}
	return runtime.ExitStatus{Known: true}, nil
}

// setSick makes container id's health command fail, or pass again.
func (f *fakeRuntime) setSick(id string, v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		c.sick = v
	}
}

// execs is how many health commands ran in container id.
func (f *fakeRuntime) execs(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		return c.execs
	}
	return 0
}

// cpuset returns the CPUs container id was created pinned to.
func (f *fakeRuntime) cpuset(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		return c.spec.Limits.CPUSet
	}
	return ""
}

func (f *fakeRuntime) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ctrs)
}
