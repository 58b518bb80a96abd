package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"
)

// Settle waits until the host's CPUs are mostly idle, so that work a subject
// leaves running in the background (a network pool refilling, a bridge
// attachment being torn down, a podman monitor exiting) does not slow the
// next subject down. It returns after maxWait at the latest.
func Settle(ctx context.Context, idle float64, window, maxWait time.Duration) {
	deadline := time.Now().Add(maxWait)
	prevIdle, prevTotal, ok := cpuTimes()
	if !ok {
		return
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(window):
		}
		i, t, ok := cpuTimes()
		if !ok {
			return
		}
		if t > prevTotal && float64(i-prevIdle)/float64(t-prevTotal) >= idle {
			return
		}
		prevIdle, prevTotal = i, t
	}
}

// cpuTimes returns the idle (idle + iowait) and total jiffies of all CPUs
// from /proc/stat.
func cpuTimes() (idle, total uint64, ok bool) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return idle, total, true
}

// Before each recorded run the host must have been this idle over a window,
// or SettleMax must have passed.
const (
	SettleIdle   = 0.9
	SettleWindow = 20 * time.Millisecond
	SettleMax    = 200 * time.Millisecond
)
