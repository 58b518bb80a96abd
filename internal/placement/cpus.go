package placement

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// PinMaxCPU is the largest max_cpu a replica may have and still be pinned
// to one CPU: a replica that may use more than a core must be free to run
// on several, or pinning would cap its vertical scaling.
const PinMaxCPU = 1.0

// CPUs places replicas on the CPUs of one host: a replica whose MaxCPU is
// more than 0 and at most PinMaxCPU is pinned to one CPU chosen by Pick;
// larger or unlimited replicas are not pinned. It remembers which replica
// holds which CPU until Release.
type CPUs struct {
	rules RulesFunc

	mu     sync.Mutex
	cpus   []int
	placed map[string]placed // replica id → where
}

type placed struct {
	app string
	cpu int
}

// NewCPUs returns a placer over cpus (none: nothing is pinned) with the
// apps' rules (nil: none).
func NewCPUs(cpus []int, rules RulesFunc) *CPUs {
	if rules == nil {
		rules = func(string) Rules { return Rules{} }
	}
	return &CPUs{cpus: append([]int(nil), cpus...), rules: rules, placed: map[string]placed{}}
}

// Place picks the CPUs of replica req: a cpuset in the kernel's list
// format ("3"), or "" when the replica is not pinned. Placing a replica
// that is placed already returns its CPU.
func (c *CPUs) Place(req Request) string {
	if len(c.cpus) < 2 || !(req.MaxCPU > 0 && req.MaxCPU <= PinMaxCPU) {
		return "" // one CPU: nothing to choose; large replicas run anywhere
	}
	rules := c.rules(req.App)
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.placed[req.ID]; ok {
		return strconv.Itoa(p.cpu)
	}
	slots := make([]Slot, len(c.cpus))
	index := make(map[int]int, len(c.cpus))
	for i, cpu := range c.cpus {
		slots[i] = Slot{Name: strconv.Itoa(cpu), Apps: map[string]int{}}
		index[cpu] = i
	}
	for _, p := range c.placed {
		if i, ok := index[p.cpu]; ok {
			slots[i].Apps[p.app]++
		}
	}
	i := Pick(req.App, slots, rules)
	c.placed[req.ID] = placed{app: req.App, cpu: c.cpus[i]}
	return slots[i].Name
}

// Adopt records that replica id of app runs on cpuset (as Place returned
// it), for replicas a restarted daemon takes over. A cpuset that is not one
// CPU of this placer is ignored.
func (c *CPUs) Adopt(id, app, cpuset string) {
	cpu, err := strconv.Atoi(cpuset)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.cpus {
		if x == cpu {
			c.placed[id] = placed{app: app, cpu: cpu}
			return
		}
	}
}

// Release forgets replica id's place.
func (c *CPUs) Release(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.placed, id)
}

// Load returns how many replicas are pinned to each CPU.
func (c *CPUs) Load() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]int, len(c.cpus))
	for _, cpu := range c.cpus {
		out[cpu] = 0
	}
	for _, p := range c.placed {
		out[p.cpu]++
	}
	return out
}

// HostCPUs returns the CPUs this process may run on (its affinity, which
// its cpuset bounds), in order.
func HostCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("cpu affinity: %w", err)
	}
	var out []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out, nil
}

// ParseList parses a kernel CPU list ("0-3,8,10-11").
func ParseList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad cpu %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}
