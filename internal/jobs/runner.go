package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

// Runtime is what the sandbox runner needs of the container runtime.
type Runtime interface {
	Run(ctx context.Context, s runtime.Spec) (*runtime.Container, error)
	Create(ctx context.Context, s runtime.Spec) (*runtime.Container, error)
	StartCreated(ctx context.Context, id string) error
	Wait(ctx context.Context, id string) (runtime.ExitStatus, error)
	Signal(id string, sig syscall.Signal) error
	Stats(id string) (runtime.Stats, error)
	Delete(ctx context.Context, id string) error
}

// Images resolves a job's image.
type Images interface {
	Get(ctx context.Context, ref string) (image.Image, error)
}

// Namespaces hands out empty network namespaces (network.Manager in
// None mode, from its pool of ready ones). Recycle gives one back for
// reuse once its container is gone, if nothing is left in it; Release
// destroys it.
type Namespaces interface {
	Acquire(ctx context.Context, id string, mode network.Mode) (*network.Attachment, error)
	Release(ctx context.Context, a *network.Attachment) error
	Recycle(ctx context.Context, a *network.Attachment) error
}

// Sandbox runs a job's steps in containers with hard limits: an empty
// network namespace, a read-only image root, a size-capped work directory
// shared by the steps (/work) and a private /tmp, no capabilities,
// no_new_privs, the runtime's seccomp filter, a pids limit, a memory limit
// without swap, a CPU quota, a CPU time limit (RLIMIT_CPU per process and
// the cgroup's usage checked by the daemon) and a wall time limit. Output is
// read while it streams and the step is killed once a stream passes its cap.
type Sandbox struct {
	RT     Runtime
	Images Images
	// Net gives each step a ready empty namespace; nil makes the runtime
	// create a fresh one per step.
	Net Namespaces
	// Dir holds the jobs' work directories (a tmpfs each).
	Dir string
	// UID and GID run the steps' processes (default 65534, nobody); with
	// UserNS they are ids inside the sandbox.
	UID, GID int
	// UserNS, if set, runs sandboxes in user namespaces: root in the first
	// tenant's maps to host uid UserNS.HostID, and each further tenant, in
	// the order they first run a job, gets the next UserNS.Size host ids
	// (see userNS), so that no two tenants' sandboxes share a host uid.
	UserNS *runtime.UserNS
	// CPUCheck is how often the daemon compares a step's CPU time with its
	// limit (default 100ms).
	CPUCheck time.Duration
	Clock    clock.Clock
	Log      *slog.Logger
	// Warm is how many sandboxes are kept created ahead for one shape of
	// job (image, first step's limits, work size; see warmPool), each with a
	// namespace, work tmpfs and cgroups of its own and Stub as its
	// process; a job of that shape starts its first step by handing the
	// stub its command, without running the OCI runtime. 0: none.
	Warm int
	// Stub is the host path of the shoal-init binary, mounted read-only at
	// stub.Path in warm sandboxes (readable by the sandbox's host uid).
	Stub string
	// Reuse makes the warm sandboxes reusable: each runs stub.Serve, which
	// starts a job's first step in a cgroup of the step's own below the
	// sandbox's, and is emptied once the job is over for the next job of
	// its shape (see kept), so that most jobs run without the OCI runtime.
	// It needs a runtime that gives a container's cgroup (CgroupPaths).
	Reuse bool
	pool  warmPool
	ids   tenantIDs
}

// Labels on job containers.
const (
	LabelKind   = "shoal.kind"
	LabelJob    = "shoal.job"
	LabelDigest = "shoal.image.digest"
	LabelImage  = "shoal.image"
)

func (s *Sandbox) clock() clock.Clock {
	if s.Clock == nil {
		return clock.Real{}
	}
	return s.Clock
}

func (s *Sandbox) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// hostOwner is the host uid and gid that own what a sandbox in user
// namespace ns (nil: none) writes.
func (s *Sandbox) hostOwner(ns *runtime.UserNS) (int, int) {
	if ns != nil {
		return int(ns.HostID) + s.UID, int(ns.HostID) + s.GID
	}
	return s.UID, s.GID
}

// Run runs every step of job j as planned by p. Once the last step that
// runs has ended and its result is known, it calls ready (the job can be
// answered), then removes that step's container and the work directory.
func (s *Sandbox) Run(ctx context.Context, j *Job, p *Plan, ready func()) error {
	t0 := time.Now()
	img, err := s.Images.Get(ctx, p.Req.Image)
	if err != nil {
		return fmt.Errorf("image %q: %w", p.Req.Image, err)
	}
	ns, err := s.userNS(p.Tenant)
	if err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	var warm *warmBox
	if s.Warm > 0 && s.Stub != "" && ctx.Err() == nil {
		warm = s.take(ctx, keyOf(p, img, ns, s.Reuse), img)
	}
	work := filepath.Join(s.Dir, j.ID)
	reusable := warm != nil && warm.z != nil
	if reusable {
		// Emptied and given back once the job is over, whatever happens.
		defer s.release(warm)
	}
	if warm != nil {
		work = warm.work
		if err := s.writeFiles(work, p, ns); err != nil {
			if !reusable {
				s.destroyWarm(warm)
			}
			return fmt.Errorf("job %s: work directory: %w", j.ID, err)
		}
	} else if err := s.makeWork(work, p, ns); err != nil {
		s.removeWork(work)
		return fmt.Errorf("job %s: work directory: %w", j.ID, err)
	}
	warmUsed := false
	if !reusable {
		defer s.removeWork(work)
		defer func() {
			if warm != nil && !warmUsed {
				// Cancelled before its first step: its sandbox goes unused.
				warm.work = ""
				s.destroyWarm(warm)
			}
		}()
	}
	prep := time.Since(t0)
	j.Steps = make([]StepResult, 0, len(p.Steps))
	okSoFar := true
	// skip says whether step i will not run, and how it ends then.
	skip := func(i int) (StepResult, bool) {
		st := &p.Steps[i]
		switch {
		case ctx.Err() != nil:
			return StepResult{Name: st.Name, Status: StepKilled, Error: "cancelled before it started"}, true
		case st.If == "success" && !okSoFar:
			return StepResult{Name: st.Name, Status: StepSkipped}, true
		}
		return StepResult{}, false
	}
	for i := 0; i < len(p.Steps); i++ {
		if res, skipped := skip(i); skipped {
			okSoFar = okSoFar && res.Status != StepKilled
			j.Steps = append(j.Steps, res)
			continue
		}
		var res StepResult
		var teardown func() time.Duration
		if i == 0 && reusable {
			res, teardown = s.boxStep(ctx, warm, p, &p.Steps[0])
		} else if i == 0 && warm != nil {
			warmUsed = true
			res, teardown = s.warmStep(ctx, warm, p, &p.Steps[0])
		} else {
			res, teardown = s.step(ctx, j.ID, i, img, p, &p.Steps[i], work, ns)
		}
		if i == 0 {
			res.CreateMs += ms(prep)
		}
		if res.Status != StepOK {
			okSoFar = false
		}
		last := true
		for k := i + 1; k < len(p.Steps); k++ {
			if _, skipped := skip(k); !skipped {
				last = false
				break
			}
		}
		if !last {
			res.TeardownMs = ms(teardown())
			j.Steps = append(j.Steps, res)
			continue
		}
		j.Steps = append(j.Steps, res)
		idx := len(j.Steps) - 1
		for k := i + 1; k < len(p.Steps); k++ {
			res, _ := skip(k)
			j.Steps = append(j.Steps, res)
		}
		ready()
		// Measured, but after the answer: seen in the daemon's metrics.
		j.Steps[idx].TeardownMs = ms(teardown())
		break
	}
	s.log().Debug("job sandbox done", "job", j.ID, "total", time.Since(t0).String())
	return nil
}

// makeWork mounts a size-capped tmpfs at work and writes the input files.
func (s *Sandbox) makeWork(work string, p *Plan, ns *runtime.UserNS) error {
	if err := s.mountWork(work, p.Work, ns); err != nil {
		return err
	}
	return s.writeFiles(work, p, ns)
}

// mountWork mounts a tmpfs of size bytes at work, a new directory, owned
// by the sandbox's user in ns.
func (s *Sandbox) mountWork(work string, size int64, ns *runtime.UserNS) error {
	uid, gid := s.hostOwner(ns)
	if err := os.Mkdir(work, 0o700); err != nil {
		return err
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755,uid=%d,gid=%d", size, inodes(size), uid, gid)
	if err := unix.Mount("tmpfs", work, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs at %s: %w", work, err)
	}
	return nil
}

// writeFiles writes the job's input files into the work tmpfs, through an
// os.Root (no link followed), before any step of the job has run in it.
func (s *Sandbox) writeFiles(work string, p *Plan, ns *runtime.UserNS) error {
	uid, gid := s.hostOwner(ns)
	if len(p.Req.Files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(work)
	if err != nil {
		return err
	}
	defer root.Close()
	for name, content := range p.Req.Files {
		if dir := filepath.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("files[%q]: %w", name, err)
			}
			if err := chownPath(root, dir, uid, gid); err != nil {
				return fmt.Errorf("files[%q]: %w", name, err)
			}
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("files[%q]: %w", name, err)
		}
		_, err = f.Write(content)
		if err == nil {
			err = f.Chown(uid, gid)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("files[%q]: %w", name, err)
		}
	}
	return nil
}

// inodes bounds the files of a tmpfs of size bytes: one per 4 KiB, at
// least 1024. Without a bound a flood of empty files grows the kernel's
// inode memory, not the file system's size, until the step's memory limit
// kills it.
func inodes(size int64) int64 { return max(size/4096, 1024) }

// chownPath gives every directory of dir (relative to root) to uid:gid.
func chownPath(root *os.Root, dir string, uid, gid int) error {
	for d := dir; d != "." && d != "/"; d = filepath.Dir(d) {
		if err := root.Lchown(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sandbox) removeWork(work string) {
	if err := unix.Unmount(work, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		s.log().Warn("unmount job work directory", "dir", work, "err", err)
	}
	if err := os.RemoveAll(work); err != nil {
		s.log().Warn("remove job work directory", "dir", work, "err", err)
	}
}

// spec is the container spec of one step, in user namespace ns (nil: none).
func (s *Sandbox) spec(id string, img image.Image, p *Plan, st *Step, work string, ns *runtime.UserNS) runtime.Spec {
	l := st.Limits
	env := append(append(append([]string{}, img.Config.Env...), p.Req.Env...), st.Env...)
	cwd := st.Workdir
	if cwd == "" {
		cwd = "/work"
	}
	cpuSecs := uint64((l.CPUTimeLimit() + time.Second - 1) / time.Second)
	return runtime.Spec{
		ID:             id,
		Layers:         img.Layers,
		ReadOnlyRootfs: true,
		Args:           st.Args,
		Env:            env,
		Cwd:            cwd,
		User:           strconv.Itoa(s.UID) + ":" + strconv.Itoa(s.GID),
		Hostname:       "sandbox",
		Limits: runtime.Limits{
			CPUs:        l.CPUs,
			MemoryBytes: l.MemoryBytes,
			Pids:        l.Pids,
		},
		Mounts: []runtime.Mount{
			{Source: work, Destination: "/work", Options: []string{"nosuid", "nodev"}},
			{Type: "tmpfs", Destination: "/tmp", SizeBytes: l.TmpBytes, Options: []string{"mode=1777", "nr_inodes=" + strconv.FormatInt(inodes(l.TmpBytes), 10)}},
		},
		Capabilities: []string{},
		Rlimits: []specs.POSIXRlimit{
			{Type: "RLIMIT_CPU", Soft: cpuSecs, Hard: cpuSecs + 1},
			{Type: "RLIMIT_CORE", Soft: 0, Hard: 0},
			{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 1024},
		},
		UserNS:    ns,
		Ephemeral: true,
		Labels: map[string]string{
			LabelKind: "job", LabelJob: p.Req.Image, LabelDigest: img.Digest, LabelImage: p.Req.Image,
		},
	}
}

// stepCtx carries what ended a step early.
type stepEnd struct {
	timeout, cpu, output, cancelled bool
}

// step runs step i and returns its result and the function that removes
// its container and namespace (and says how long that took).
func (s *Sandbox) step(ctx context.Context, jobID string, i int, img image.Image, p *Plan, st *Step, work string, ns *runtime.UserNS) (StepResult, func() time.Duration) {
	res := StepResult{Name: st.Name}
	t0 := time.Now()
	id := fmt.Sprintf("%s-%d", jobID, i)
	spec := s.spec(id, img, p, st, work, ns)
	spec.Labels[LabelJob] = jobID
	var att *network.Attachment
	started := false
	teardown := s.teardown(ctx, id, &started, &att)
	if s.Net != nil {
		var err error
		if att, err = s.Net.Acquire(ctx, id, network.None); err != nil {
			return internalError(res, fmt.Errorf("network namespace: %w", err)), teardown
		}
		spec.NetNSPath = att.NSPath
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return internalError(res, err), teardown
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return internalError(res, err), teardown
	}
	spec.Stdout, spec.Stderr = outW, errW
	if len(st.Stdin) > 0 {
		spec.Stdin = bytes.NewReader(st.Stdin)
	}
	tCreate := time.Now()
	_, err = s.RT.Run(ctx, spec)
	outW.Close()
	errW.Close()
	tStarted := time.Now()
	res.CreateMs, res.StartMs = ms(tCreate.Sub(t0)), ms(tStarted.Sub(tCreate))
	if err != nil {
		outR.Close()
		errR.Close()
		s.RT.Delete(context.WithoutCancel(ctx), id)
		if ctx.Err() != nil {
			res.Status, res.ExitCode, res.Error = StepKilled, -1, "cancelled while it started"
			return res, teardown
		}
		if notExecutable(err) {
			// The submission's fault, not the platform's: reported as a
			// shell would (127).
			res.Status, res.ExitCode, res.Error = StepNonzeroExit, 127, fmt.Sprintf("cannot run %q: %v", st.Args[0], err)
			return res, teardown
		}
		return internalError(res, fmt.Errorf("start: %w", err)), teardown
	}
	started = true
	return s.finish(ctx, ctrProc{s.RT, id}, st, outR, errR, res, tStarted), teardown
}

// finish supervises a started step to its end and fills in its result.
func (s *Sandbox) finish(ctx context.Context, pr proc, st *Step, outR, errR *os.File, res StepResult, tStarted time.Time) StepResult {
	end, exit, werr := s.supervise(ctx, pr, st.Limits, outR, errR, &res)
	tExited := time.Now()
	res.ExecMs = ms(tExited.Sub(tStarted))
	res.WallMs = res.ExecMs
	if stats, err := pr.stats(); err == nil {
		res.CPUMs = float64(stats.CPUUsageNs) / 1e6
		res.MemoryPeak = stats.MemoryPeakBytes
		if !end.timeout && st.Limits.CPUTimeLimit() > 0 && time.Duration(stats.CPUUsageNs) >= st.Limits.CPUTimeLimit() &&
			(exit.Signal == syscall.SIGKILL || exit.Signal == syscall.SIGXCPU) {
			end.cpu = true // the kernel's RLIMIT_CPU or the daemon's check
		}
	}
	if werr != nil {
		return internalError(res, werr)
	}
	res.ExitCode = exit.Code
	if exit.Signal != 0 {
		res.Signal = exit.Signal.String()
	}
	res.Status = status(end, exit, st.OKCodes)
	return res
}

// teardown returns the function that removes a step's container (once
// *started) and gives its namespace back (if *att is set), and says how
// long that took.
func (s *Sandbox) teardown(ctx context.Context, id string, started *bool, att **network.Attachment) func() time.Duration {
	return func() time.Duration {
		t := time.Now()
		deleted := false
		if *started {
			err := s.RT.Delete(context.WithoutCancel(ctx), id)
			if err != nil {
				s.log().Warn("remove job container", "container", id, "err", err)
			}
			deleted = err == nil
		}
		if *att != nil {
			// Only a namespace whose processes are known to be gone may
			// serve another job; Recycle still checks that it is empty.
			giveBack := s.Net.Release
			if deleted {
				giveBack = s.Net.Recycle
			}
			if err := giveBack(context.WithoutCancel(ctx), *att); err != nil {
				s.log().Warn("release job namespace", "container", id, "err", err)
			}
		}
		return time.Since(t)
	}
}

func status(end stepEnd, exit runtime.ExitStatus, okCodes []int) string {
	switch {
	case end.cancelled:
		return StepKilled
	case end.output:
		return StepOutputLimit
	case end.timeout || end.cpu:
		return StepTimeout
	case exit.OOMKilled:
		return StepOOM
	case exit.Signal == syscall.SIGXCPU:
		return StepTimeout
	case exit.Signal != 0:
		return StepNonzeroExit
	}
	if len(okCodes) == 0 {
		okCodes = []int{0}
	}
	for _, c := range okCodes {
		if exit.Code == c {
			return StepOK
		}
	}
	return StepNonzeroExit
}

// notExecutable reports an OCI runtime error about the step's command:
// missing, not executable, or not in $PATH.
func notExecutable(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "executable file not found") ||
		(strings.Contains(msg, "exec:") && (strings.Contains(msg, "no such file or directory") || strings.Contains(msg, "permission denied")))
}

func internalError(res StepResult, err error) StepResult {
	res.Status, res.Error, res.ExitCode = StepInternalError, err.Error(), -1
	return res
}
