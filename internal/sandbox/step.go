package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

// stepEnd carries what ended a step early.
type stepEnd struct {
	timeout, cpu, output, cancelled bool
}

// step runs step i and returns its result and the function that removes
// its container and namespace (and says how long that took).
func (s *Sandbox) step(ctx context.Context, jobID string, i int, img image.Image, p *jobs.Plan, st *jobs.Step, work string, ns *runtime.UserNS) (jobs.StepResult, func() time.Duration) {
	res := jobs.StepResult{Name: st.Name}
	t0 := time.Now()
	id := fmt.Sprintf("%s-%d", jobID, i)
	spec := s.spec(id, img, p, st, work, ns)
	spec.Labels[labels.Job] = jobID
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
			res.Status, res.ExitCode, res.Error = jobs.StepKilled, -1, "cancelled while it started"
			return res, teardown
		}
		if notExecutable(err) {
			// The submission's fault, not the platform's: reported as a
			// shell would (127).
			res.Status, res.ExitCode, res.Error = jobs.StepNonzeroExit, 127, fmt.Sprintf("cannot run %q: %v", st.Args[0], err)
			return res, teardown
		}
		return internalError(res, fmt.Errorf("start: %w", err)), teardown
	}
	started = true
	return s.finish(ctx, ctrProc{s.RT, id}, st, outR, errR, res, tStarted), teardown
}

// finish supervises a started step to its end and fills in its result.
func (s *Sandbox) finish(ctx context.Context, pr proc, st *jobs.Step, outR, errR *os.File, res jobs.StepResult, tStarted time.Time) jobs.StepResult {
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
		return jobs.StepKilled
	case end.output:
		return jobs.StepOutputLimit
	case end.timeout || end.cpu:
		return jobs.StepTimeout
	case exit.OOMKilled:
		return jobs.StepOOM
	case exit.Signal == syscall.SIGXCPU:
		return jobs.StepTimeout
	case exit.Signal != 0:
		return jobs.StepNonzeroExit
	}
	if len(okCodes) == 0 {
		okCodes = []int{0}
	}
	for _, c := range okCodes {
		if exit.Code == c {
			return jobs.StepOK
		}
	}
	return jobs.StepNonzeroExit
}

// notExecutable reports an OCI runtime error about the step's command:
// missing, not executable, or not in $PATH.
func notExecutable(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "executable file not found") ||
		(strings.Contains(msg, "exec:") && (strings.Contains(msg, "no such file or directory") || strings.Contains(msg, "permission denied")))
}

func internalError(res jobs.StepResult, err error) jobs.StepResult {
	res.Status, res.Error, res.ExitCode = jobs.StepInternalError, err.Error(), -1
	return res
}
