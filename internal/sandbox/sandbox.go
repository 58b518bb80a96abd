// Package sandbox runs a job's steps (a jobs.Plan) in hard-limited
// containers sharing one work directory: it is the jobs queue's Runner in
// the daemon. Sandboxes are made ahead (warm) and, by default, reused for
// the next job of the same tenant and shape: each step in a reused sandbox
// runs in a cgroup of its own below the sandbox's, and the sandbox is
// emptied (runtime/wipe) and checked between jobs (reuse*.go, warm.go).
// With Sandbox.UserNS each tenant's sandboxes run in a user namespace of
// their own (userns.go).
// stub is the daemon's side of shoal-init, the process of warm sandboxes.
package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/labels"
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

// A Sandbox is the queue's Runner.
var _ jobs.Runner = (*Sandbox)(nil)

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
	// its shape (see wipe.Kept), so that most jobs run without the OCI runtime.
	// It needs a runtime that gives a container's cgroup (CgroupPaths).
	Reuse bool
	pool  warmPool
	ids   tenantIDs
}

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
func (s *Sandbox) Run(ctx context.Context, j *jobs.Job, p *jobs.Plan, ready func()) error {
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
	if warm != nil && warm.z != nil && !warm.z.ready() {
		// Its process ended while it waited: dropped, and this job takes
		// the ordinary path rather than fail with it.
		s.release(warm)
		warm = nil
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
	j.Steps = make([]jobs.StepResult, 0, len(p.Steps))
	okSoFar := true
	// skip says whether step i will not run, and how it ends then.
	skip := func(i int) (jobs.StepResult, bool) {
		st := &p.Steps[i]
		switch {
		case ctx.Err() != nil:
			return jobs.StepResult{Name: st.Name, Status: jobs.StepKilled, Error: "cancelled before it started"}, true
		case st.If == "success" && !okSoFar:
			return jobs.StepResult{Name: st.Name, Status: jobs.StepSkipped}, true
		}
		return jobs.StepResult{}, false
	}
	for i := 0; i < len(p.Steps); i++ {
		if res, skipped := skip(i); skipped {
			okSoFar = okSoFar && res.Status != jobs.StepKilled
			j.Steps = append(j.Steps, res)
			continue
		}
		var res jobs.StepResult
		var teardown func() time.Duration
		inBox, readied := reusable && i == 0, time.Duration(0)
		if reusable && i > 0 {
			t := time.Now()
			inBox = s.nextStep(warm, &p.Steps[i])
			readied = time.Since(t)
		}
		if inBox {
			res, teardown = s.boxStep(ctx, warm, p, &p.Steps[i])
			res.CreateMs += ms(readied)
		} else if i == 0 && warm != nil {
			warmUsed = true
			res, teardown = s.warmStep(ctx, warm, p, &p.Steps[0])
		} else {
			res, teardown = s.step(ctx, j.ID, i, img, p, &p.Steps[i], work, ns)
		}
		if i == 0 {
			res.CreateMs += ms(prep)
		}
		if res.Status != jobs.StepOK {
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

// spec is the container spec of one step, in user namespace ns (nil: none).
func (s *Sandbox) spec(id string, img image.Image, p *jobs.Plan, st *jobs.Step, work string, ns *runtime.UserNS) runtime.Spec {
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
			labels.Kind: labels.KindJob, labels.Job: p.Req.Image, labels.Digest: img.Digest, labels.Image: p.Req.Image,
		},
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
