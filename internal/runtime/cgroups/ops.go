package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// freezePolls bounds how often Freeze re-reads the freezer state while the
// kernel is still freezing tasks: about 8 s in all, for a loaded host.
const freezePolls = 4000

// Freeze stops every task of the cgroup and returns once the kernel reports
// the cgroup frozen.
func (p Paths) Freeze() error {
	if p.V2 {
		return p.setFrozenV2(true)
	}
	return p.setFrozenV1("FROZEN")
}

// Thaw resumes a frozen cgroup.
func (p Paths) Thaw() error {
	if p.V2 {
		return p.setFrozenV2(false)
	}
	return p.setFrozenV1("THAWED")
}

// Frozen reports whether the cgroup is frozen.
func (p Paths) Frozen() (bool, error) {
	if p.V2 {
		ev, err := readKV(filepath.Join(p.Unified, "cgroup.events"))
		if err != nil {
			return false, err
		}
		return ev["frozen"] == 1, nil
	}
	d, err := p.dir("freezer")
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile(filepath.Join(d, "freezer.state"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == "FROZEN", nil
}

// Thawed reports whether the cgroup is neither frozen nor being frozen: a
// freeze under way (v1's FREEZING, v2's cgroup.freeze 1 before the kernel
// reports frozen) is not thawed.
func (p Paths) Thawed() (bool, error) {
	file := filepath.Join(p.Unified, "cgroup.freeze")
	want := "0"
	if !p.V2 {
		d, err := p.dir("freezer")
		if err != nil {
			return false, err
		}
		file, want = filepath.Join(d, "freezer.state"), "THAWED"
	} else if p.Unified == "" {
		return false, errors.New("no cgroup2 hierarchy")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == want, nil
}

func (p Paths) setFrozenV1(state string) error {
	d, err := p.dir("freezer")
	if err != nil {
		return err
	}
	file := filepath.Join(d, "freezer.state")
	for i := 0; i < freezePolls; i++ {
		// Writing FROZEN again restarts a freeze that got stuck in
		// FREEZING. A v1 freeze can stay stuck while a task is in the
		// middle of a fork (a shell's loop forking every few ms): a brief
		// thaw lets it finish before the next try, as runc's own freezer
		// does.
		if i%50 == 0 {
			if i > 0 && state == "FROZEN" {
				if err := os.WriteFile(file, []byte("THAWED"), 0); err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
				time.Sleep(time.Millisecond)
			}
			if err := os.WriteFile(file, []byte(state), 0); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if strings.TrimSpace(string(b)) == state {
			return nil
		}
		time.Sleep(100 * time.Microsecond * time.Duration(1+i/100))
	}
	b, _ := os.ReadFile(file)
	return fmt.Errorf("%s: did not become %s (%s; %s)", file, state, strings.TrimSpace(string(b)), tasksOf(d))
}

// tasksOf says what each task of the v1 freezer cgroup d and its children
// is doing: "pid comm state wchan", to tell from a freeze that did not
// end which task the kernel could not freeze.
func tasksOf(d string) string {
	var out []string
	filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() != "tasks" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, tid := range strings.Fields(string(b)) {
			proc := filepath.Join("/proc", tid)
			stat, _ := os.ReadFile(filepath.Join(proc, "stat"))
			comm, st := "?", "?"
			if i, j := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')'); i >= 0 && j > i {
				comm = string(stat[i+1 : j])
				if f := strings.Fields(string(stat[j+1:])); len(f) > 0 {
					st = f[0]
				}
			}
			wchan, _ := os.ReadFile(filepath.Join(proc, "wchan"))
			out = append(out, fmt.Sprintf("%s %s %s %s", tid, comm, st, strings.TrimSpace(string(wchan))))
		}
		return nil
	})
	if len(out) == 0 {
		return "no task"
	}
	return "tasks: " + strings.Join(out, ", ")
}

func (p Paths) setFrozenV2(frozen bool) error {
	if p.Unified == "" {
		return errors.New("no cgroup2 hierarchy")
	}
	val, want := "0", int64(0)
	if frozen {
		val, want = "1", 1
	}
	file := filepath.Join(p.Unified, "cgroup.freeze")
	if err := os.WriteFile(file, []byte(val), 0); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	events := filepath.Join(p.Unified, "cgroup.events")
	for i := 0; i < freezePolls; i++ {
		ev, err := readKV(events)
		if err != nil {
			return err
		}
		if ev["frozen"] == want {
			return nil
		}
		time.Sleep(100 * time.Microsecond * time.Duration(1+i/100))
	}
	return fmt.Errorf("%s: frozen did not become %d", events, want)
}

// DefaultPeriodUs is the CFS period shoal uses for CPU quotas.
const DefaultPeriodUs = 100000

// SetCPUs sets the CPU quota to cpus cores (0 or less: no limit) over the
// cgroup's current period.
func (p Paths) SetCPUs(cpus float64) error {
	if p.V2 {
		file := filepath.Join(p.Unified, "cpu.max")
		period := int64(DefaultPeriodUs)
		if b, err := os.ReadFile(file); err == nil {
			if f := strings.Fields(string(b)); len(f) == 2 {
				if v, err := strconv.ParseInt(f[1], 10, 64); err == nil && v > 0 {
					period = v
				}
			}
		}
		val := "max " + strconv.FormatInt(period, 10)
		if cpus > 0 {
			val = fmt.Sprintf("%d %d", QuotaUs(cpus, period), period)
		}
		if err := os.WriteFile(file, []byte(val), 0); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		return nil
	}
	d, err := p.dir("cpu")
	if err != nil {
		return err
	}
	period, err := readInt(filepath.Join(d, "cpu.cfs_period_us"))
	if err != nil || period <= 0 {
		period = DefaultPeriodUs
	}
	quota := int64(-1)
	if cpus > 0 {
		quota = QuotaUs(cpus, period)
	}
	file := filepath.Join(d, "cpu.cfs_quota_us")
	if err := os.WriteFile(file, []byte(strconv.FormatInt(quota, 10)), 0); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// QuotaUs converts cores to a CFS quota over periodUs; the kernel's minimum
// quota is 1000us.
func QuotaUs(cpus float64, periodUs int64) int64 {
	q := int64(cpus*float64(periodUs) + 0.5)
	if q < 1000 {
		q = 1000
	}
	return q
}

// CPUQuota reads the quota and period in microseconds; quota is -1 when
// unlimited.
func (p Paths) CPUQuota() (quota, period int64, err error) {
	if p.V2 {
		b, err := os.ReadFile(filepath.Join(p.Unified, "cpu.max"))
		if err != nil {
			return 0, 0, err
		}
		return parseCPUMax(string(b))
	}
	d, err := p.dir("cpu")
	if err != nil {
		return 0, 0, err
	}
	if quota, err = readInt(filepath.Join(d, "cpu.cfs_quota_us")); err != nil {
		return 0, 0, err
	}
	period, err = readInt(filepath.Join(d, "cpu.cfs_period_us"))
	return quota, period, err
}

func parseCPUMax(s string) (quota, period int64, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("cpu.max: unexpected %q", s)
	}
	quota = -1
	if f[0] != "max" {
		if quota, err = strconv.ParseInt(f[0], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("cpu.max: %w", err)
		}
	}
	period, err = strconv.ParseInt(f[1], 10, 64)
	return quota, period, err
}

// Remove kills what is left in the cgroup and removes its directories in every
// hierarchy, children first. Missing directories are not an error.
func (p Paths) Remove() error {
	var errs []error
	for _, d := range p.Dirs() {
		if err := removeTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Exists reports whether any directory of p exists.
func (p Paths) Exists() bool {
	for _, d := range p.Dirs() {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return false
}

func removeTree(dir string) error {
	// Most have no child: one rmdir, without listing the control files.
	if err := syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	var last error
	for i := 0; i < 200; i++ {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		last = err
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		killProcs(dir)
		time.Sleep(time.Millisecond * time.Duration(1+i/20))
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, last)
}

// killProcs sends SIGKILL to every process listed in dir/cgroup.procs.
func killProcs(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, line := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(line)); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Procs lists the processes of the cgroup (from the pids controller on v1).
func (p Paths) Procs() ([]int, error) {
	d, err := p.dir("pids")
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, line := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(line)); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

func readInt(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	return v, nil
}

// readKV reads a flat "key value" file such as cpu.stat or memory.events.
func readKV(file string) (map[string]int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return parseKV(b), nil
}

func parseKV(b []byte) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			out[f[0]] = v
		}
	}
	return out
}
