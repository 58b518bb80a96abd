package cgroups

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Usage reads only what a finished step's result needs of Stats: its CPU
// time and its peak memory, each with one small read and no file poller
// (about a fifth of Stats's time). A counter the hierarchy lacks is 0.
func (p Paths) Usage() (Stats, error) {
	var s Stats
	if p.V2 {
		b, err := readSmall(filepath.Join(p.Unified, "cpu.stat"))
		if err != nil {
			return s, err
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return s, fmt.Errorf("%s/cpu.stat: %w", p.Unified, err)
				}
				s.CPUUsageNs = n * 1000
			}
		}
		s.MemoryPeakBytes, _ = readUint(filepath.Join(p.Unified, "memory.peak"))
		return s, nil
	}
	if d, ok := p.V1["cpuacct"]; ok {
		v, err := readUint(filepath.Join(d, "cpuacct.usage"))
		if err != nil {
			return s, err
		}
		s.CPUUsageNs = v
	}
	if d, ok := p.V1["memory"]; ok {
		v, err := readUint(filepath.Join(d, "memory.max_usage_in_bytes"))
		if err != nil {
			return s, err
		}
		s.MemoryPeakBytes = v
	}
	return s, nil
}

// readSmall reads a control file of at most 4 KiB with plain system calls.
func readSmall(name string) ([]byte, error) {
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer syscall.Close(fd)
	buf := make([]byte, 4096)
	n, err := syscall.Read(fd, buf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return buf[:n], nil
}

func readUint(name string) (uint64, error) {
	b, err := readSmall(name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}
