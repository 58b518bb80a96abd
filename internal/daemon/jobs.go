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
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/sandbox"
)

// Job sandbox identities. With a user namespace, root in the sandbox is
// host uid jobHostID; without one, steps run as jobUID (nobody).
const (
	jobHostID = 100000
	jobIDs    = 65536
	jobUID    = 65534
)

// jobService is the job queue with the runtime its sandboxes run on.
type jobService struct {
	// Queue is one host's queue (jobs.Open) or this node's part of the
	// cluster's (jobs.OpenCluster, also in cluster), chosen on opening.
	jobs.Queue
	cluster *jobs.ClusterQueue
	// rt is the sandboxes' own runtime when they use a user namespace
	// (nil: the daemon's runtime).
	rt     *runtime.Runtime
	sb     *sandbox.Sandbox
	parent string   // rt's cgroup parent
	dirs   []string // the directories rt's opening may have made, outermost first
}

// close stops the queue, if it was opened (its sandboxes are killed and
// removed), removes the warm sandboxes, then the sandboxes' cgroup parent.
func (s *jobService) close() {
	if s.Queue != nil {
		s.Queue.Close()
	}
	if s.sb != nil {
		s.sb.Close()
	}
	if s.parent != "" {
		removeCgroup(s.parent)
	}
}

// removeCgroup removes the empty cgroup path in every hierarchy.
func removeCgroup(path string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, r := range append(roots, "/sys/fs/cgroup") {
		os.Remove(filepath.Join(r, path))
	}
}

// openJobs starts the job queue. Sandboxes map root to an unprivileged
// host uid through a user namespace when the host allows it: their bundles
// and work directories then live in <data-dir>.sandbox (0711: searched,
// not listed, by every tenant's host uids), because the sandbox's init
// resolves those paths inside the user namespace and the data dir stays
// 0700. Each tenant gets host ids of its own (jobHostID upwards, jobIDs
// each, see sandbox.Sandbox.UserNS). They run on a runtime of
// their own under the cgroup parent <cgroup-parent>-jobs. Otherwise they
// run as uid 65534 on the daemon's runtime, and `shoal info` says why.
//
// Slots default to two per CPU; SHOAL_JOB_SLOTS overrides it, and
// SHOAL_JOB_TENANTS sets weights and quotas
// ("NAME=WEIGHT[:MAXQUEUED[:MAXRUNNING]],..."), SHOAL_JOB_RETENTION how
// long finished jobs are kept (default 24h), SHOAL_JOB_ATTEMPTS how often a
// job whose daemon or node was lost while it ran is started (default 2).
//
// On an error nothing it made is left: the sandboxes' cgroup parent and the
// directories it made empty are removed.
func (d *Daemon) openJobs(ctx context.Context) (err error) {
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
	var retention time.Duration
	if v := os.Getenv("SHOAL_JOB_RETENTION"); v != "" {
		if retention, err = time.ParseDuration(v); err != nil || retention <= 0 {
			return fmt.Errorf("SHOAL_JOB_RETENTION=%q: want a duration such as 24h", v)
		}
	}
	attempts := 0
	if v := os.Getenv("SHOAL_JOB_ATTEMPTS"); v != "" {
		if attempts, err = strconv.Atoi(v); err != nil || attempts <= 0 {
			return fmt.Errorf("SHOAL_JOB_ATTEMPTS=%q: want a positive count", v)
		}
	}
	svc := &jobService{}
	var made []string // directories to remove (when empty) on an error
	defer func() {
		if err != nil {
			svc.close()
			for i := len(made) - 1; i >= 0; i-- {
				os.Remove(made[i])
			}
		}
	}()
	sb := &sandbox.Sandbox{RT: d.rt, Images: d.images, Net: d.net, UID: jobUID, GID: jobUID, Clock: clock.Real{}, Log: d.log}
	how := ""
	if os.Getenv("SHOAL_JOB_USERNS") == "0" {
		how = "without a user namespace (SHOAL_JOB_USERNS=0)"
	} else if err := runtime.UserNSUsable(jobHostID, jobIDs); err != nil {
		how = fmt.Sprintf("without a user namespace (%v)", err)
	} else if err := d.openSandboxRuntime(ctx, svc); err != nil {
		how = fmt.Sprintf("without a user namespace (%v)", err)
	} else {
		made = append(made, svc.dirs...)
		sb.RT, sb.UID, sb.GID = svc.rt, 0, 0
		sb.UserNS = &runtime.UserNS{HostID: jobHostID, Size: jobIDs}
		sb.Dir = filepath.Join(d.sandboxDir(), "jobs")
		how = fmt.Sprintf("as root in a user namespace mapped to host uids %d-%d for the first tenant, the next %d for each other tenant", jobHostID, jobHostID+jobIDs-1, jobIDs)
	}
	if sb.UserNS == nil {
		sb.Dir = filepath.Join(d.cfg.DataDir, "jobs")
		how = fmt.Sprintf("as uid %d %s", jobUID, how)
		d.log.Warn("job sandboxes run without a user namespace", "why", how)
	}
	if err := cleanJobDirs(sb.Dir); err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	made = append(made, sb.Dir)
	if err := os.MkdirAll(sb.Dir, 0o700); err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	if sb.UserNS != nil {
		if err := os.Chmod(sb.Dir, 0o711); err != nil {
			return fmt.Errorf("jobs: %w", err)
		}
	}
	if err := d.warmSandboxes(sb, slots); err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	if sb.Stub != "" {
		made = append(made, sb.Stub) // the copy of shoal-init goes too
	}
	svc.sb = sb
	kept := "kept warm"
	if sb.Reuse && sb.Warm > 0 {
		kept = "kept warm and reused from job to job (emptied in between)"
	}
	d.notes = append(d.notes, fmt.Sprintf("jobs: %d slots, %d sandboxes %s; sandboxes run %s, with no capabilities and no network", slots, sb.Warm, kept, how))
	metered := newMeteredRunner(sb, d.reg, func() (int, int, int) {
		if d.jobs == nil || d.jobs.Queue == nil {
			return 0, 0, slots
		}
		return d.jobs.Stats()
	})
	registerNetnsMetrics(d.reg, d.net.Stats)
	registerWarmMetrics(d.reg, sb.WarmStats)
	o := jobs.Options{
		Store: d.store, Runner: metered, Slots: slots, Weights: weights, Quotas: quotas,
		DefaultQuota: jobs.Quota{MaxQueued: 10000}, Retention: retention, MaxAttempts: attempts,
		CheckImage: func(ctx context.Context, ref string) error {
			_, err := d.images.Get(ctx, ref)
			return err
		},
		Clock: clock.Real{}, Logger: d.log,
	}
	if d.lead != nil {
		// One queue for the cluster: the leader assigns, this node runs
		// what is assigned to it.
		if d.events == nil {
			d.events = events.New(d.store, clock.Real{}, eventsKept)
		}
		d.jobFetch = new(atomic.Pointer[agent.Fetcher])
		o.Cluster, o.Node, o.Event = d.lead.hub, d.cfg.Node, d.jobEvent(d.events)
		o.Runner = fetchingRunner{Runner: metered, fetch: d.jobFetch}
		o.ImageDigest = func(ctx context.Context, ref string) (string, error) {
			img, err := d.images.Get(ctx, ref)
			return img.Digest, err
		}
	}
	if d.lead != nil {
		q, err := jobs.OpenCluster(ctx, o)
		if err != nil {
			return fmt.Errorf("jobs: %w", err)
		}
		d.lead.hub.Register(q) // the leader's assignment
		svc.Queue, svc.cluster = q, q
	} else {
		m, err := jobs.Open(ctx, o)
		if err != nil {
			return fmt.Errorf("jobs: %w", err)
		}
		svc.Queue = m
	}
	d.jobs = svc
	return nil
}

// warmSandboxes sets how many sandboxes are kept created ahead (one per
// slot; SHOAL_JOB_WARM overrides it, 0 turns it off) and installs their
// process: a copy of the shoal-init found beside this binary (none there:
// none kept warm), beside the work directories, where the sandboxes' host
// uid can read it. They are reusable (sandbox.Sandbox.Reuse: emptied after a
// job, they serve the next of the tenant's jobs of that shape) unless
// SHOAL_JOB_REUSE=0.
func (d *Daemon) warmSandboxes(sb *sandbox.Sandbox, slots int) error {
	sb.Warm = slots
	if v := os.Getenv("SHOAL_JOB_WARM"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("SHOAL_JOB_WARM=%q: want a count, 0 for none", v)
		}
		sb.Warm = n
	}
	if sb.Warm == 0 {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("warm sandboxes: %w", err)
	}
	initBin := filepath.Join(filepath.Dir(self), "shoal-init")
	if _, err := os.Stat(initBin); err != nil {
		d.log.Warn("no sandboxes kept warm: shoal-init is not beside shoal", "err", err)
		sb.Warm = 0
		return nil
	}
	stub := filepath.Join(filepath.Dir(sb.Dir), "shoal-init")
	b, err := os.ReadFile(initBin)
	if err == nil {
		err = os.WriteFile(stub+".tmp", b, 0o755)
	}
	if err != nil {
		return fmt.Errorf("warm sandboxes: %w", err)
	}
	if err := os.Rename(stub+".tmp", stub); err != nil {
		return fmt.Errorf("warm sandboxes: %w", err)
	}
	sb.Stub = stub
	sb.Reuse = os.Getenv("SHOAL_JOB_REUSE") != "0"
	return nil
}

// sandboxDir holds the bundles and work directories of user-namespaced
// sandboxes.
func (d *Daemon) sandboxDir() string { return filepath.Clean(d.cfg.DataDir) + ".sandbox" }

// openSandboxRuntime prepares the sandbox directory and opens the runtime
// the sandboxes run on, removing whatever a previous daemon left there.
func (d *Daemon) openSandboxRuntime(ctx context.Context, svc *jobService) error {
	dir := d.sandboxDir()
	if err := searchable(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	parent := "/" + strings.Trim(d.cfg.Cgroup, "/") + "-jobs"
	root, runRoot := filepath.Join(dir, "containers"), filepath.Join(d.cfg.RunDir, "runc-jobs")
	rt, err := runtime.New(ctx, runtime.Options{
		Root: root, RuntimeRoot: runRoot,
		Runtime: d.rt.Name(), CgroupParent: parent, Clock: clock.Real{}, Logger: d.log,
	})
	if err != nil {
		return err
	}
	if _, _, err := rt.Recover(ctx); err != nil {
		// What a previous daemon left there stays for the next one.
		return fmt.Errorf("recover sandboxes: %w", err)
	}
	svc.rt, svc.parent, svc.dirs = rt, parent, []string{dir, root, runRoot}
	return nil
}

// searchable checks that any host uid, every tenant's sandboxes' among
// them, can reach dir: every directory from / down must let others
// search it.
func searchable(dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if st.Mode&0o001 == 0 {
			return fmt.Errorf("%s (mode %o) is not searchable by the sandboxes' host uids (%d and up)", p, st.Mode&0o7777, jobHostID)
		}
		if p == "/" {
			return nil
		}
	}
}

func (d *Daemon) closeJobs() {
	if d.jobs != nil {
		d.jobs.close()
	}
}

// holdImage holds image digest for its removal (containers.HoldImage):
// user is a container or sandbox using it, so that an image in use is not
// removed.
func (d *Daemon) holdImage(ctx context.Context, digest string) (user string, release func(), err error) {
	user, release, err = d.ctrs.HoldImage(ctx, digest)
	if err != nil || user != "" || d.jobs == nil || d.jobs.rt == nil {
		return user, release, err
	}
	cs, err := d.jobs.rt.List(ctx)
	if err != nil {
		release()
		return "", nil, err
	}
	for _, c := range cs {
		if c.Labels[labels.Digest] == digest {
			release()
			return c.ID, nil, nil
		}
	}
	return "", release, nil
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
