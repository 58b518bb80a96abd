package cgroups

import (
	"errors"
	"io/fs"
	"path/filepath"
)

// Stats are the counters of one cgroup. Times are nanoseconds.
type Stats struct {
	CPUUsageNs      uint64
	NrPeriods       uint64
	NrThrottled     uint64
	ThrottledNs     uint64
	MemoryBytes     uint64
	MemoryPeakBytes uint64
	OOMKills        uint64
	Pids            uint64
}

// Stats reads the cgroup's counters. A counter whose file the kernel does not
// offer (memory.peak before Linux 5.19) stays zero.
func (p Paths) Stats() (Stats, error) {
	if p.V2 {
		return statsV2(p.Unified)
	}
	return p.statsV1()
}

func (p Paths) statsV1() (Stats, error) {
	var s Stats
	var err error
	get := func(controller, file string) (int64, bool) {
		d, ok := p.V1[controller]
		if !ok {
			return 0, false
		}
		v, e := readInt(filepath.Join(d, file))
		if e != nil {
			if !errors.Is(e, fs.ErrNotExist) && err == nil {
				err = e
			}
			return 0, false
		}
		return v, true
	}
	if v, ok := get("cpuacct", "cpuacct.usage"); ok {
		s.CPUUsageNs = uint64(v)
	}
	if d, ok := p.V1["cpu"]; ok {
		kv, e := readKV(filepath.Join(d, "cpu.stat"))
		if e == nil {
			s.NrPeriods = uint64(kv["nr_periods"])
			s.NrThrottled = uint64(kv["nr_throttled"])
			s.ThrottledNs = uint64(kv["throttled_time"])
		} else if !errors.Is(e, fs.ErrNotExist) {
			err = e
		}
	}
	if v, ok := get("memory", "memory.usage_in_bytes"); ok {
		s.MemoryBytes = uint64(v)
	}
	if v, ok := get("memory", "memory.max_usage_in_bytes"); ok {
		s.MemoryPeakBytes = uint64(v)
	}
	if d, ok := p.V1["memory"]; ok {
		if kv, e := readKV(filepath.Join(d, "memory.oom_control")); e == nil {
			s.OOMKills = uint64(kv["oom_kill"])
		}
	}
	if v, ok := get("pids", "pids.current"); ok {
		s.Pids = uint64(v)
	}
	return s, err
}

func statsV2(dir string) (Stats, error) {
	var s Stats
	kv, err := readKV(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return s, err
	}
	s.CPUUsageNs = uint64(kv["usage_usec"]) * 1000
	s.NrPeriods = uint64(kv["nr_periods"])
	s.NrThrottled = uint64(kv["nr_throttled"])
	s.ThrottledNs = uint64(kv["throttled_usec"]) * 1000
	if v, err := readInt(filepath.Join(dir, "memory.current")); err == nil {
		s.MemoryBytes = uint64(v)
	}
	if v, err := readInt(filepath.Join(dir, "memory.peak")); err == nil {
		s.MemoryPeakBytes = uint64(v)
	}
	if ev, err := readKV(filepath.Join(dir, "memory.events")); err == nil {
		s.OOMKills = uint64(ev["oom_kill"])
	}
	if v, err := readInt(filepath.Join(dir, "pids.current")); err == nil {
		s.Pids = uint64(v)
	}
	return s, nil
}

// OOMKills reads only the OOM kill counter, which is what a container's exit
// needs.
func (p Paths) OOMKills() uint64 {
	if p.V2 {
		if ev, err := readKV(filepath.Join(p.Unified, "memory.events")); err == nil {
			return uint64(ev["oom_kill"])
		}
		return 0
	}
	if d, ok := p.V1["memory"]; ok {
		if kv, err := readKV(filepath.Join(d, "memory.oom_control")); err == nil {
			return uint64(kv["oom_kill"])
		}
	}
	return 0
}
