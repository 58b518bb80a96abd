package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUUse is what a vertical-scaling verdict reads of a cgroup's CPU: its
// cumulative counters.
type CPUUse struct {
	// Periods and Throttled are cpu.stat's nr_periods and nr_throttled:
	// the CFS periods in which the cgroup had work, and those in which
	// it hit its quota.
	Periods, Throttled uint64
	// Used is the CPU time the cgroup's tasks used.
	Used time.Duration
	// Stalled is cpu.pressure's "some" total: how long at least one of
	// its tasks waited for a CPU. Pressure says the cgroup has the file
	// (cgroup v2, where the kernel has PSI).
	Stalled  time.Duration
	Pressure bool
}

// CPUUse reads what an autoscaling decision needs of Stats: the CFS
// period counters and the CPU time used (one small read of cpu.stat on
// v2, two reads on v1), and the cgroup's CPU pressure where the cgroup2
// hierarchy has it, with no file poller. A hierarchy without the cpu
// controller reads zeros.
func (p Paths) CPUUse() (CPUUse, error) {
	var u CPUUse
	dir := p.Unified
	if !p.V2 {
		d, ok := p.V1["cpu"]
		if !ok {
			return u, nil
		}
		dir = d
	}
	name := filepath.Join(dir, "cpu.stat")
	b, err := readSmall(name)
	if err != nil {
		return u, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || (k != "nr_periods" && k != "nr_throttled" && k != "usage_usec") {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return u, fmt.Errorf("%s: %s: %w", name, k, err)
		}
		switch k {
		case "nr_periods":
			u.Periods = n
		case "nr_throttled":
			u.Throttled = n
		default:
			u.Used = time.Duration(n) * time.Microsecond
		}
	}
	if !p.V2 {
		if d, ok := p.V1["cpuacct"]; ok {
			n, err := readUint(filepath.Join(d, "cpuacct.usage"))
			if err != nil {
				return u, err
			}
			u.Used = time.Duration(n)
		}
	}
	if p.Unified != "" {
		if err := u.readPressure(filepath.Join(p.Unified, "cpu.pressure")); err != nil {
			return u, err
		}
	}
	return u, nil
}

// readPressure reads the "some" total of a PSI file: a file that is not
// there (a kernel without PSI, a v1 host's container outside the cgroup2
// hierarchy, a kernel booted with psi=0) leaves Pressure false.
func (u *CPUUse) readPressure(name string) error {
	b, err := readSmall(name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP) {
		return nil
	}
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "some ")
		if !ok {
			continue
		}
		for f := range strings.FieldsSeq(rest) {
			v, ok := strings.CutPrefix(f, "total=")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: some total: %w", name, err)
			}
			u.Stalled, u.Pressure = time.Duration(n)*time.Microsecond, true
			return nil
		}
	}
	return fmt.Errorf("%s: no \"some\" total", name)
}
