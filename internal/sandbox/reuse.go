package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/runtime/cgroups"
	"github.com/shoal-run/shoal/internal/runtime/wipe"
	"github.com/shoal-run/shoal/internal/sandbox/stub"
)

// A reusable sandbox (Sandbox.Reuse) is a warm sandbox whose process is
// stub.Serve: instead of running one step and going, it starts each step
// it is sent as a stub in a cgroup made for that step below its own, and is
// emptied between jobs (see wipe.Kept). It serves one shape of job, so one
// tenant (the shape holds the tenant's host uid), at most boxRuns jobs.
// Since a step's memory, pids and CPU limits are its own cgroup's, and its
// time and output limits the daemon's, the shape of a reusable sandbox is
// only the image, the tenant and the sizes of /work and /tmp.

// pipeAtomic is what a write to an empty pipe always takes at once
// (PIPE_BUF on Linux).
const pipeAtomic = 4096

// boxRuns is how many jobs a reusable sandbox serves before it is replaced.
const boxRuns = 1000

// box is what a reusable sandbox has beyond a warm one.
type box struct {
	ctl  *net.UnixConn // to Serve's stdin
	pid  int           // host pid of Serve
	cg   cgroups.Paths // the sandbox's cgroup; each step's is a child
	keep *wipe.Kept    // what is emptied or restored between jobs
	runs int           // jobs served
	seq  int           // steps started, naming their cgroups
	// bad is why the sandbox is not reused, once a step or Serve failed
	// (see check); nil: none. The first reason is kept (fail).
	bad  error
	next *stepPrep // the step made ready for the next job
	// spent is the cgroup of the last job's step, removed once the job is
	// over (removeSpent).
	spent cgroups.Paths
	// last is the limits of the last job's step, which the next step's
	// cgroup is given ahead: a job with the same then writes none.
	last cgroups.ChildLimits
}

// boxRuntime is what reusable sandboxes need of the runtime beyond Runtime.
type boxRuntime interface {
	CgroupPaths(id string) cgroups.Paths
}

// startBox starts the container of spec (made by makeWarm) as a reusable
// sandbox: its process is Serve with the control socket as stdin.
func (s *Sandbox) startBox(ctx context.Context, b *warmBox, spec runtime.Spec, work string) (err error) {
	brt, ok := s.RT.(boxRuntime)
	if !ok {
		return errors.New("the runtime cannot give a container's cgroup")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "sandbox control")
	defer theirs.Close()
	z := &box{}
	if z.ctl, err = unixConn(fds[0], "daemon control"); err != nil {
		return err
	}
	b.z = z
	spec.Args = []string{stub.Path, stub.ServeArg}
	spec.Stdin, spec.Stdout, spec.Stderr = theirs, nil, nil
	// The sandbox's cgroup has no limit of its own: each step's memory,
	// pids and CPU quota are its cgroup's (boxStep), its CPU time limit its
	// stub's RLIMIT_CPU; so Serve has none of these.
	spec.Limits = runtime.Limits{}
	rl := spec.Rlimits[:0:0]
	for _, r := range spec.Rlimits {
		if r.Type != "RLIMIT_CPU" {
			rl = append(rl, r)
		}
	}
	spec.Rlimits = rl
	c, err := s.RT.Run(ctx, spec)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	z.pid = c.Pid
	z.cg = brt.CgroupPaths(b.id)
	if err := z.cg.Nest(); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	if z.keep, err = wipe.Open(z.pid, wipe.Dir{Name: "/work", Path: work}, wipe.Dir{Name: "/tmp"}); err != nil {
		return err
	}
	return z.prepare()
}

// close releases what the daemon holds of a reusable sandbox, and the
// cgroups of its step made ready and of its last step, if any.
func (z *box) close() {
	if z.next != nil {
		z.next.drop()
		z.next = nil
	}
	if z.spent.Dirs() != nil {
		z.spent.Kill()
		z.removeSpent()
	}
	if z.ctl != nil {
		z.ctl.Close()
	}
	if z.keep != nil {
		z.keep.Close()
	}
}

// fail marks the sandbox not to be reused, for reason why (the first
// kept: later failures follow from it).
func (z *box) fail(why error) {
	if z.bad == nil {
		z.bad = why
	}
}

// unixConn makes fd (a unix socket) a *net.UnixConn, and closes fd.
func unixConn(fd int, name string) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c.(*net.UnixConn), nil
}

// stepPrep is the next step of a reusable sandbox, made ready while the
// sandbox waits for its job: a cgroup of its own below the sandbox's, and
// a stub started by Serve and moved into that cgroup, which waits for its
// command. A job so starts its first step by writing its limits into the
// cgroup, then its command: the stub's start-up and the cgroup were made
// ahead. The cgroup gets the last job's limits once the stub is in it
// (the stub, a fork of Serve waiting in a read, uses far less memory than
// the least a job may have, and a single pid), so that a job with the same
// limits, the common case, writes none. Serve starts no stub, answering
// why, if a job changed what Serve hands down to its next child (its
// resource limits, OOM score adjustment, core dump filter, or any thread's
// scheduling, CPU affinity or I/O priority) or shows the next job (its
// autogroup): the sandbox is then dropped.
type stepPrep struct {
	cg      cgroups.Paths
	limits  cgroups.ChildLimits // as written in cg
	io      *stepIO
	replies chan reply
}

// prepare readies the sandbox's next step (z.next). On an error the
// sandbox is not reused.
func (z *box) prepare() (err error) {
	z.seq++
	p := &stepPrep{}
	made := false
	defer func() {
		if err != nil {
			z.fail(fmt.Errorf("its next step could not be readied: %w", err))
			if made {
				p.drop()
			}
		}
	}()
	if p.cg, err = z.cg.MakeChild(fmt.Sprintf("step%d", z.seq), cgroups.ChildLimits{}); err != nil {
		return fmt.Errorf("step cgroup: %w", err)
	}
	made = true
	if p.io, err = newStepIO(); err != nil {
		return err
	}
	defer p.io.closeTheirs()
	if _, _, err := z.ctl.WriteMsgUnix([]byte{stub.MsgRun}, p.io.rights(), nil); err != nil {
		return fmt.Errorf("sandbox control: %w", err)
	}
	p.io.closeTheirs()
	p.replies = make(chan reply, 1)
	go func() { p.replies <- readReply(z.ctl) }()
	pid, err := p.io.announced(context.Background())
	if errors.Is(err, io.EOF) {
		// The sync socket closed with no announcement: Serve started
		// no stub and says why (a job changed what it hands down: see
		// shoal-init's changed), or the stub ended and Serve says how.
		// Either answer is on its way, if not read yet.
		return p.noStub(err)
	}
	if err != nil {
		return err
	}
	if err := p.cg.Attach(pid); err != nil {
		return err
	}
	if err := p.cg.SetLimits(cgroups.ChildLimits{}, z.last); err != nil {
		return fmt.Errorf("step cgroup: %w", err)
	}
	p.limits = z.last
	z.next = p
	return nil
}

// noStub is why the step's stub did not announce itself (err, the sync
// socket's end): Serve's answer to the request, waited for at most
// announceTimeout.
func (p *stepPrep) noStub(err error) error {
	t := time.NewTimer(announceTimeout)
	defer t.Stop()
	select {
	case r := <-p.replies:
		p.replies <- r
		if r.err != nil {
			return r.err
		}
		return fmt.Errorf("step stub ended before it started (wait status %#x)", uint32(r.status))
	case <-t.C:
		return err
	}
}

// drop kills a prepared step's stub and removes its cgroup.
func (p *stepPrep) drop() {
	if p.io != nil {
		p.io.closeOurs()
	}
	p.cg.Kill()
	p.cg.Remove()
}

// boxStep runs a step of a job in reusable sandbox b (the first, or a
// later one readied by nextStep): its
// prepared step (see stepPrep) gets the step's limits, then its command
// (none of the job's code runs before its limits),
// and is supervised as in step. The step's cgroup is removed, the sandbox
// emptied and its next step made ready once the job is over, off its slot
// (release); its teardown has nothing left to do.
func (s *Sandbox) boxStep(ctx context.Context, b *warmBox, p *jobs.Plan, st *jobs.Step) (jobs.StepResult, func() time.Duration) {
	res := jobs.StepResult{Name: st.Name}
	t0 := time.Now()
	z := b.z
	prep := z.next
	z.next = nil
	teardown := func() time.Duration { return 0 }
	if prep != nil {
		z.spent = prep.cg
	}
	if prep == nil {
		z.fail(errors.New("it had no step ready for a job"))
		return internalError(res, errors.New("the sandbox has no step ready")), teardown
	}
	limits := cgroups.ChildLimits{MemoryBytes: st.Limits.MemoryBytes, Pids: st.Limits.Pids, CPUs: st.Limits.CPUs}
	z.last = limits
	if err := prep.cg.SetLimits(prep.limits, limits); err != nil {
		z.fail(fmt.Errorf("its step's cgroup could not be limited: %w", err))
		prep.drop()
		return internalError(res, fmt.Errorf("step cgroup: %w", err)), teardown
	}
	cwd := st.Workdir
	if cwd == "" {
		cwd = "/work"
	}
	cmd := stub.Encode(stub.Cmd{Args: st.Args, Env: append(append([]string{}, p.Req.Env...), st.Env...), Cwd: cwd,
		CPUSecs: uint64((st.Limits.CPUTimeLimit() + time.Second - 1) / time.Second)})
	io := prep.io
	if len(cmd)+len(st.Stdin) <= pipeAtomic {
		// Fits in the empty pipe: written at once, no goroutine needed.
		// Fails only if the stub is gone; its result says why.
		io.stdin.Write(append(cmd, st.Stdin...))
		io.stdin.Close()
	} else {
		go func() {
			if _, err := io.stdin.Write(cmd); err == nil && len(st.Stdin) > 0 {
				io.stdin.Write(st.Stdin)
			}
			io.stdin.Close()
		}()
	}
	tStarted := time.Now()
	res.StartMs = ms(tStarted.Sub(t0))
	pr := &boxProc{cg: prep.cg, replies: prep.replies}
	res = s.finish(ctx, pr, st, io.outR, io.errR, res, tStarted)
	if err := pr.failed(); err != nil {
		z.fail(err)
	}
	if res.ExitCode == 127 && strings.HasPrefix(res.Stderr, stub.Failed) {
		line, rest, _ := strings.Cut(res.Stderr, "\n")
		res.Error, res.Stderr = strings.TrimPrefix(line, "shoal-init: "), rest
	}
	return res, teardown
}

// ready says whether the sandbox can take a job: its next step is ready,
// and neither that step's stub nor Serve has ended since (either would
// have answered). One that cannot is marked bad, so release drops it.
func (z *box) ready() bool {
	if z.bad != nil {
		return false
	}
	if z.next == nil {
		z.fail(errors.New("it had no step ready for a job"))
		return false
	}
	select {
	case r := <-z.next.replies:
		z.next.replies <- r // for the step's teardown, which reads it
		why := r.err
		if why == nil {
			why = fmt.Errorf("wait status %#x", uint32(r.status))
		}
		z.fail(fmt.Errorf("its step made ready ended before its job: %w", why))
		return false
	default:
	}
	// Serve's end reaches replies through a goroutine reading its socket,
	// which a loaded host may not have run yet: ask the kernel too.
	if !processAlive(z.pid) {
		z.fail(fmt.Errorf("its process %d has ended", z.pid))
		return false
	}
	return true
}

// processAlive reports whether pid is a process that has not exited: one
// that is gone or a zombie is not.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The command name may hold spaces and parentheses: the state is the
	// field after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

// reply is Serve's answer to a step: its wait status, or why it failed.
type reply struct {
	status syscall.WaitStatus
	err    error
}

func readReply(c *net.UnixConn) reply {
	buf := make([]byte, 512)
	n, _, _, _, err := c.ReadMsgUnix(buf, nil)
	switch {
	case err != nil:
		return reply{err: fmt.Errorf("sandbox process: %w", err)}
	case n == 0:
		return reply{err: errors.New("sandbox process ended")}
	case buf[0] == stub.MsgExit && n == 5:
		return reply{status: syscall.WaitStatus(binary.BigEndian.Uint32(buf[1:5]))}
	case buf[0] == stub.MsgFail:
		return reply{err: fmt.Errorf("sandbox process: %s", buf[1:n])}
	}
	return reply{err: fmt.Errorf("sandbox process: malformed answer %q", buf[:n])}
}

// boxProc is a step's stub in a reusable sandbox, as supervise sees it.
// Its methods run on supervise's goroutines, so it says through its own
// bad, not its box's, that its cgroup could not be killed or Serve failed.
type boxProc struct {
	cg      cgroups.Paths
	replies chan reply
	mu      sync.Mutex
	bad     error // the first failure
}

// failed says why the step's sandbox is not reused, if it is not: the
// step's cgroup could not be killed or Serve did not answer.
func (p *boxProc) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bad
}

func (p *boxProc) fail(why error) {
	p.mu.Lock()
	if p.bad == nil {
		p.bad = why
	}
	p.mu.Unlock()
}

func (p *boxProc) kill() {
	if err := p.cg.Kill(); err != nil {
		p.fail(fmt.Errorf("its step's processes could not be killed: %w", err))
	}
}

// stats is what the step's result and its CPU time limit need.
func (p *boxProc) stats() (runtime.Stats, error) { return p.cg.Usage() }

// wait waits for the stub to end, then kills what it left in its cgroup,
// as the end of a container's init ends its pid namespace.
func (p *boxProc) wait() (runtime.ExitStatus, error) {
	r := <-p.replies
	p.kill()
	if r.err != nil {
		p.fail(fmt.Errorf("its step: %w", r.err))
		return runtime.ExitStatus{}, r.err
	}
	st := runtime.ExitStatus{Known: true}
	if ws := r.status; ws.Signaled() {
		st.Signal = ws.Signal()
		st.Code = 128 + int(st.Signal)
	} else {
		st.Code = ws.ExitStatus()
	}
	// As for a container (runtime.ExitStatus.OOMKilled): the step's cgroup
	// is its own, so a kill counted there explains an end by SIGKILL or a
	// non-zero exit (a shell reporting its killed child).
	st.OOMKilled = (st.Signal == syscall.SIGKILL || st.Code != 0) && p.cg.OOMKills() > 0
	return st, nil
}

// nextStep readies reusable sandbox b for a later step st of the job it
// runs, and says whether it is: the last step's cgroup removed (so none of
// its processes is left), Serve the only process of the sandbox, all but
// /work emptied (each step has its own /tmp, /dev/shm and IPC objects, as
// on the ordinary path), and a stub made ready (which also checks that no
// step changed Serve). A step whose /tmp is of another size than the
// sandbox's, or a sandbox that cannot be readied, takes the ordinary path
// (a container of its own on the same /work); a sandbox that failed is
// not reused.
func (s *Sandbox) nextStep(b *warmBox, st *jobs.Step) bool {
	z := b.z
	if z.bad != nil || st.Limits.TmpBytes != b.shape.limits.TmpBytes {
		return false
	}
	err := z.removeSpent()
	if err == nil {
		err = z.check()
	}
	if err == nil {
		err = z.keep.WipeBut("/work")
	}
	if err == nil {
		err = z.prepare()
	}
	if err != nil {
		z.fail(fmt.Errorf("a later step could not be readied: %w", err))
		s.log().Warn("reusable job sandbox: a later step takes the ordinary path", "sandbox", b.id, "err", err)
		return false
	}
	return true
}

// removeSpent removes the cgroup of the last job's step, if any: that
// fails if a process is left in it.
func (z *box) removeSpent() error {
	if z.spent.Dirs() == nil {
		return nil
	}
	err := z.spent.Remove()
	z.spent = cgroups.Paths{}
	if err != nil {
		return fmt.Errorf("its last step's cgroup: %w", err)
	}
	return nil
}

// check says whether the sandbox can serve another job: Serve answered
// every step, and it is the only process left in the sandbox's cgroup.
// (What a job could change of Serve itself, Serve checks before it starts
// the next step: see stepPrep.)
func (z *box) check() error {
	if z.bad != nil {
		return z.bad
	}
	cg := z.cg
	if cg.V2 {
		cg = cg.Child(cgroups.NestLeaf)
	}
	procs, err := cg.Procs()
	if err != nil {
		return fmt.Errorf("its processes: %w", err)
	}
	if len(procs) != 1 || procs[0] != z.pid {
		return fmt.Errorf("processes %v in its cgroup, want only its own (%d)", procs, z.pid)
	}
	return nil
}
