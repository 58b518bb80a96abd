package cgroups

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Throttling reads only what an autoscaling decision needs of Stats: the
// CFS period counters of cpu.stat (nr_periods, nr_throttled), one small
// read of one file on either hierarchy, against Stats's six through the
// file poller. A hierarchy without the cpu controller reads 0, 0.
func (p Paths) Throttling() (periods, throttled uint64, err error) {
	dir := p.Unified
	if !p.V2 {
		d, ok := p.V1["cpu"]
		if !ok {
			return 0, 0, nil
		}
		dir = d
	}
	name := filepath.Join(dir, "cpu.stat")
	b, err := readSmall(name)
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || (k != "nr_periods" && k != "nr_throttled") {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %s: %w", name, k, err)
		}
		if k == "nr_periods" {
			periods = n
		} else {
			throttled = n
		}
	}
	return periods, throttled, nil
}
