package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/jobs"
)

// Sandbox identity of job steps when no user namespace is used.
const jobUID, jobGID = 65534, 65534

// openJobs starts the job queue: work directories a previous daemon left
// are removed, then queued jobs (and jobs that were running) are queued
// again. Slots default to two per CPU; SHOAL_JOB_SLOTS overrides it, and
// SHOAL_JOB_TENANTS sets weights and quotas ("NAME=WEIGHT[:MAXQUEUED[:MAXRUNNING]],...").
func (d *Daemon) openJobs(ctx context.Context) error {
	dir := filepath.Join(d.cfg.DataDir, "jobs")
	if err := cleanJobDirs(dir); err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	slots := 2 * goruntime.NumCPU()
	if v := os.Getenv("SHOAL_JOB_SLOTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("SHOAL_JOB_SLOTS=%q: want a positive count", v)
		}
		slots = n
	}
	weights, quotas, err := parseTenants(os.Getenv("SHOAL_JOB_TENANTS"))
	if err != nil {
		return err
	}
	sb := &jobs.Sandbox{
		RT: d.rt, Images: d.images, Net: d.net, Dir: dir,
		UID: jobUID, GID: jobGID, Clock: clock.Real{}, Log: d.log,
	}
	d.notes = append(d.notes, fmt.Sprintf("jobs: %d slots; steps run as uid %d with no capabilities, without a user namespace (runc %s needs the bundle path searchable by the mapped uid, and the data dir is 0700)", slots, jobUID, d.rt.Name()))
	m, err := jobs.Open(ctx, jobs.Options{
		Store: d.store, Runner: sb, Slots: slots, Weights: weights, Quotas: quotas,
		DefaultQuota: jobs.Quota{MaxQueued: 10000},
		CheckImage: func(ctx context.Context, ref string) error {
			_, err := d.images.Get(ctx, ref)
			return err
		},
		Clock: clock.Real{}, Logger: d.log,
	})
	if err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	d.jobs = m
	return nil
}

func (d *Daemon) closeJobs() {
	if d.jobs != nil {
		d.jobs.Close()
	}
}

// cleanJobDirs unmounts and removes work directories left by a daemon that
// died; their jobs run again from the start.
func cleanJobDirs(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		unix.Unmount(p, unix.MNT_DETACH)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

func parseTenants(s string) (map[string]float64, map[string]jobs.Quota, error) {
	weights, quotas := map[string]float64{}, map[string]jobs.Quota{}
	if strings.TrimSpace(s) == "" {
		return weights, quotas, nil
	}
	for _, item := range strings.Split(s, ",") {
		name, spec, ok := strings.Cut(strings.TrimSpace(item), "=")
		parts := strings.Split(spec, ":")
		bad := fmt.Errorf("SHOAL_JOB_TENANTS: %q is not NAME=WEIGHT[:MAXQUEUED[:MAXRUNNING]]", item)
		if !ok || name == "" || len(parts) > 3 {
			return nil, nil, bad
		}
		w, err := strconv.ParseFloat(parts[0], 64)
		if err != nil || w <= 0 {
			return nil, nil, bad
		}
		weights[name] = w
		var q jobs.Quota
		if len(parts) > 1 {
			if q.MaxQueued, err = strconv.Atoi(parts[1]); err != nil || q.MaxQueued < 0 {
				return nil, nil, bad
			}
		}
		if len(parts) > 2 {
			if q.MaxRunning, err = strconv.Atoi(parts[2]); err != nil || q.MaxRunning < 0 {
				return nil, nil, bad
			}
		}
		quotas[name] = q
	}
	return weights, quotas, nil
}
