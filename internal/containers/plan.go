package containers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/units"
)

// runPlan is a validated run request.
type runPlan struct {
	spec    runtime.Spec
	mode    network.Mode
	timeout time.Duration
	remove  bool
	digest  string // image pinned while the container starts
	// imageEnv is the image's environment, reqEnv the request's on top.
	imageEnv, reqEnv []string
}

func (s *Service) plan(ctx context.Context, req types.RunRequest) (_ *runPlan, retErr error) {
	if req.Image == "" {
		return nil, errdefs.Invalid("image", "is required")
	}
	p := &runPlan{remove: req.Remove}
	var err error
	if p.mode, err = network.ParseMode(orDefault(req.Network, "none")); err != nil {
		return nil, err
	}
	if req.Memory != "" {
		if p.spec.Limits.MemoryBytes, err = units.ParseBytes(req.Memory); err != nil {
			return nil, errdefs.Invalid("memory", "%v", err)
		}
	}
	if req.CPUs < 0 || req.CPUs > 1024 {
		return nil, errdefs.Invalid("cpus", "%v must be a number of cores from 0 to 1024", req.CPUs)
	}
	if req.Shares == 1 || req.Shares > 262144 {
		return nil, errdefs.Invalid("cpu_shares", "%d must be from 2 to 262144", req.Shares)
	}
	if req.Pids < 0 {
		return nil, errdefs.Invalid("pids", "%d must not be negative", req.Pids)
	}
	if req.Timeout != "" && req.Timeout != "0" {
		if p.timeout, err = time.ParseDuration(req.Timeout); err != nil || p.timeout < 0 {
			return nil, errdefs.Invalid("timeout", "%q is not a positive duration such as 10s", req.Timeout)
		}
	}
	img, err := s.imgs.Get(ctx, req.Image)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", req.Image, err)
	}
	// Pin the image until the container is registered, so that an image
	// removal in between cannot take its layers away.
	p.digest = img.Digest
	s.mu.Lock()
	s.starting[p.digest]++
	s.mu.Unlock()
	defer func() {
		if retErr != nil {
			s.unpin(p.digest)
		}
	}()
	args := append(append([]string{}, img.Config.Entrypoint...), img.Config.Cmd...)
	if len(req.Args) > 0 {
		args = append(append([]string{}, img.Config.Entrypoint...), req.Args...)
	}
	if len(args) == 0 {
		return nil, errdefs.Invalid("args", "image %q has no entrypoint or command; give one after the image", req.Image)
	}
	for _, e := range req.Env {
		if len(e) == 0 || e[0] == '=' || !strings.Contains(e, "=") {
			return nil, errdefs.Invalid("env", "%q must be KEY=VALUE", e)
		}
	}
	// The runtime adds a default PATH when the image sets none.
	env := append([]string{}, img.Config.Env...)
	p.imageEnv, p.reqEnv = env[:len(env):len(env)], req.Env
	cmdJSON, _ := json.Marshal(args)
	p.spec = runtime.Spec{
		Layers: img.Layers,
		Args:   args,
		Env:    append(env, req.Env...),
		Cwd:    orDefault(req.Workdir, orDefault(img.Config.WorkingDir, "/")),
		User:   img.Config.User,
		Limits: runtime.Limits{
			CPUs:        req.CPUs,
			CPUShares:   req.Shares,
			MemoryBytes: p.spec.Limits.MemoryBytes,
			Pids:        orDefaultInt(req.Pids, defaultPids),
		},
		Labels: map[string]string{labels.Kind: labels.KindRun, labels.Image: orDefault(img.Ref, img.Digest), labels.Digest: img.Digest, labels.Command: string(cmdJSON)},
	}
	return p, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func orDefaultInt(v, d int64) int64 {
	if v == 0 {
		return d
	}
	return v
}
