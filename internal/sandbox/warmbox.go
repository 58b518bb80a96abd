package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/sandbox/stub"
)

// makeWarm creates a sandbox of key's shape whose process is the stub.
func (s *Sandbox) makeWarm(key warmKey, img image.Image) (b *warmBox, err error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	b = &warmBox{id: "w" + hex.EncodeToString(rnd[:]), shape: key}
	b.work = filepath.Join(s.Dir, b.id)
	created := false
	defer func() {
		if err != nil {
			s.cleanWarm(b, created)
			err = fmt.Errorf("sandbox %s: %w", b.id, err)
		}
	}()
	var ns *runtime.UserNS
	if s.UserNS != nil {
		ns = &runtime.UserNS{HostID: key.hostID, Size: s.UserNS.Size}
	}
	if err := s.mountWork(b.work, key.work, ns); err != nil {
		return b, fmt.Errorf("work directory: %w", err)
	}
	st := &jobs.Step{JobStep: types.JobStep{Args: []string{stub.Path}, Workdir: "/"}, Limits: key.limits}
	spec := s.spec(b.id, img, &jobs.Plan{Req: types.JobRequest{Image: key.image}}, st, b.work, ns)
	spec.Mounts = append(spec.Mounts, runtime.Mount{Source: s.Stub, Destination: stub.Path, ReadOnly: true, Options: []string{"nosuid", "nodev"}})
	ctx := context.Background()
	if s.Net != nil {
		if b.att, err = s.Net.Acquire(ctx, b.id, network.None); err != nil {
			return b, fmt.Errorf("network namespace: %w", err)
		}
		spec.NetNSPath = b.att.NSPath
	}
	if s.Reuse {
		created = true // whatever startBox did is removed on an error
		return b, s.startBox(ctx, b, spec, b.work)
	}
	var inR, outW, errW *os.File
	defer func() {
		for _, f := range []*os.File{inR, outW, errW} {
			if f != nil {
				f.Close()
			}
		}
	}()
	if inR, b.stdin, err = os.Pipe(); err != nil {
		return b, err
	}
	if b.outR, outW, err = os.Pipe(); err != nil {
		return b, err
	}
	if b.errR, errW, err = os.Pipe(); err != nil {
		return b, err
	}
	spec.Stdin, spec.Stdout, spec.Stderr = inR, outW, errW
	if _, err := s.RT.Create(ctx, spec); err != nil {
		return b, fmt.Errorf("create: %w", err)
	}
	created = true
	return b, nil
}

// destroyWarm removes a warm sandbox no job took.
func (s *Sandbox) destroyWarm(b *warmBox) { s.cleanWarm(b, true) }

func (s *Sandbox) cleanWarm(b *warmBox, created bool) {
	if b.z != nil {
		// Its step made ready first: a cgroup below the sandbox's.
		b.z.close()
	}
	started := created
	s.teardown(context.Background(), b.id, &started, &b.att)()
	for _, f := range []*os.File{b.stdin, b.outR, b.errR} {
		if f != nil {
			f.Close()
		}
	}
	if b.work != "" {
		s.removeWork(b.work)
	}
}

// warmStep runs the first step of a job in warm sandbox b: the stub gets
// the step's command, the container starts, and the step is supervised
// as in step.
func (s *Sandbox) warmStep(ctx context.Context, b *warmBox, p *jobs.Plan, st *jobs.Step) (jobs.StepResult, func() time.Duration) {
	res := jobs.StepResult{Name: st.Name}
	t0 := time.Now()
	started := true // created: removed whatever happens
	teardown := s.teardown(ctx, b.id, &started, &b.att)
	cwd := st.Workdir
	if cwd == "" {
		cwd = "/work"
	}
	cmd := stub.Encode(stub.Cmd{Args: st.Args, Env: append(append([]string{}, p.Req.Env...), st.Env...), Cwd: cwd})
	go func() {
		// Fails only if the sandbox is gone; its result says why.
		if _, err := b.stdin.Write(cmd); err == nil && len(st.Stdin) > 0 {
			b.stdin.Write(st.Stdin)
		}
		b.stdin.Close()
	}()
	err := s.RT.StartCreated(ctx, b.id)
	tStarted := time.Now()
	res.StartMs = ms(tStarted.Sub(t0))
	if err != nil {
		b.outR.Close()
		b.errR.Close()
		if ctx.Err() != nil {
			res.Status, res.ExitCode, res.Error = jobs.StepKilled, -1, "cancelled while it started"
			return res, teardown
		}
		return internalError(res, fmt.Errorf("start: %w", err)), teardown
	}
	res = s.finish(ctx, ctrProc{s.RT, b.id}, st, b.outR, b.errR, res, tStarted)
	if res.ExitCode == 127 && strings.HasPrefix(res.Stderr, stub.Failed) {
		// The command could not be run: said as the ordinary path says it.
		line, rest, _ := strings.Cut(res.Stderr, "\n")
		res.Error, res.Stderr = strings.TrimPrefix(line, "shoal-init: "), rest
	}
	return res, teardown
}
