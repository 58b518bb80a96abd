package fastcontainer

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuCounters are a replica's cumulative CPU figures from its cgroup: the
// CFS periods in which it ran, those in which it hit its quota, and the
// CPU time it used.
type cpuCounters struct {
	periods, throttled uint64
	usage              float64 // s of CPU
}

// sub is c minus an earlier reading.
func (c cpuCounters) sub(o cpuCounters) cpuCounters {
	return cpuCounters{periods: c.periods - o.periods, throttled: c.throttled - o.throttled, usage: c.usage - o.usage}
}

// readCPU reads the CPU counters of the cgroup that process pid is in,
// under cgroup v1 (the cpu and cpuacct controllers) or v2.
func readCPU(pid int) (cpuCounters, error) {
	var c cpuCounters
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return c, err
	}
	paths := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			paths[""] = f[2]
		}
		for _, ctl := range strings.Split(f[1], ",") {
			paths[ctl] = f[2]
		}
	}
	stat := func(path string) (map[string]uint64, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		m := map[string]uint64{}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 {
				m[f[0]], _ = strconv.ParseUint(f[1], 10, 64)
			}
		}
		return m, nil
	}
	if p, ok := paths["cpu"]; ok {
		for _, mnt := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
			m, err := stat(filepath.Join(mnt, p, "cpu.stat"))
			if err != nil {
				continue
			}
			c.periods, c.throttled = m["nr_periods"], m["nr_throttled"]
			for _, acct := range []string{"/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct"} {
				if b, err := os.ReadFile(filepath.Join(acct, paths["cpuacct"], "cpuacct.usage")); err == nil {
					ns, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
					c.usage = float64(ns) / 1e9
					return c, nil
				}
			}
			return c, fmt.Errorf("process %d: no cpuacct.usage", pid)
		}
	}
	if p, ok := paths[""]; ok {
		for _, mnt := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			if m, err := stat(filepath.Join(mnt, p, "cpu.stat")); err == nil && m["usage_usec"] > 0 {
				c.periods, c.throttled, c.usage = m["nr_periods"], m["nr_throttled"], float64(m["usage_usec"])/1e6
				return c, nil
			}
		}
	}
	return c, fmt.Errorf("process %d: no CPU controller's cpu.stat found", pid)
}
