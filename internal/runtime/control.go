package runtime

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/runtime/cgroups"
)

// Stats are a container's cgroup counters. Times are nanoseconds.
type Stats = cgroups.Stats

// Freeze stops every process of the container by writing the cgroup freezer
// and returns once the kernel reports it frozen. Memory is kept.
func (r *Runtime) Freeze(id string) error {
	if _, err := r.live(id); err != nil {
		return err
	}
	if err := r.cgroupPaths(id).Freeze(); err != nil {
		return fmt.Errorf("container %q: freeze: %w", id, err)
	}
	return nil
}

// Thaw resumes a frozen container.
func (r *Runtime) Thaw(id string) error {
	if _, err := r.live(id); err != nil {
		return err
	}
	if err := r.cgroupPaths(id).Thaw(); err != nil {
		return fmt.Errorf("container %q: thaw: %w", id, err)
	}
	return nil
}

// UpdateCPU changes the container's CPU quota to cpus cores (0: unlimited)
// while it runs; it must be 0 or MinCPUs..MaxCPUs.
func (r *Runtime) UpdateCPU(id string, cpus float64) error {
	c, err := r.live(id)
	if err != nil {
		return err
	}
	if err := validCPUs("cpus", cpus); err != nil {
		return fmt.Errorf("container %q: %w", id, err)
	}
	if err := r.cgroupPaths(id).SetCPUs(cpus); err != nil {
		return fmt.Errorf("container %q: update cpu: %w", id, err)
	}
	c.mu.Lock()
	c.rec.CPUs = cpus
	c.mu.Unlock()
	return nil
}

// CPUSet returns the CPUs the container's tasks may run on, in the kernel's
// list format.
func (r *Runtime) CPUSet(id string) (string, error) {
	if _, err := r.live(id); err != nil {
		return "", err
	}
	s, err := r.cgroupPaths(id).CPUSet()
	if err != nil {
		return "", fmt.Errorf("container %q: cpuset: %w", id, err)
	}
	return s, nil
}

// Stats reads the container's cgroup counters. After the container has
// exited it returns the counters read at the exit.
func (r *Runtime) Stats(id string) (Stats, error) {
	c, err := r.get(id)
	if err != nil {
		return Stats{}, err
	}
	if c.exited() {
		return c.final, nil
	}
	s, err := r.cgroupPaths(id).Stats()
	if err != nil {
		return Stats{}, fmt.Errorf("container %q: stats: %w", id, err)
	}
	return s, nil
}

// CPUUse is what an autoscaling decision reads of a container's cgroup.
type CPUUse = cgroups.CPUUse

// CPUUse reads the container's CFS period counters, CPU time and CPU
// pressure and nothing else: what an autoscaling decision needs, at a
// fraction of Stats's cost. After the container has exited it returns
// the counters read at the exit.
func (r *Runtime) CPUUse(id string) (CPUUse, error) {
	c, err := r.get(id)
	if err != nil {
		return CPUUse{}, err
	}
	if c.exited() {
		return CPUUse{Periods: c.final.NrPeriods, Throttled: c.final.NrThrottled, Used: time.Duration(c.final.CPUUsageNs)}, nil
	}
	u, err := r.cgroupPaths(id).CPUUse()
	if err != nil {
		return CPUUse{}, fmt.Errorf("container %q: cpu use: %w", id, err)
	}
	return u, nil
}

// live returns a container that has not exited.
func (r *Runtime) live(id string) (*ctr, error) {
	c, err := r.get(id)
	if err != nil {
		return nil, err
	}
	if c.exited() {
		return nil, fmt.Errorf("container %q: %w: %w", id, errExited, errdefs.ErrConflict)
	}
	return c, nil
}

// Get describes one container.
func (r *Runtime) Get(id string) (*Container, error) {
	c, err := r.get(id)
	if err != nil {
		return nil, err
	}
	return r.describe(c), nil
}

// List describes every container this Runtime manages, oldest first.
func (r *Runtime) List(ctx context.Context) ([]*Container, error) {
	r.mu.Lock()
	cs := make([]*ctr, 0, len(r.ctrs))
	for _, c := range r.ctrs {
		if c.rec.Pid != 0 {
			cs = append(cs, c)
		}
	}
	r.mu.Unlock()
	out := make([]*Container, 0, len(cs))
	for _, c := range cs {
		out = append(out, r.describe(c))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, ctx.Err()
}

// CgroupPaths is where the container's cgroup is in every hierarchy; a
// caller may make child cgroups there (cgroups.Paths.MakeChild).
func (r *Runtime) CgroupPaths(id string) cgroups.Paths { return r.cgroupPaths(id) }
