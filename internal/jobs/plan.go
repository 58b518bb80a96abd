package jobs

import (
	"fmt"
	"math"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/units"
)

// Bounds of a submission.
const (
	MaxSteps      = 16
	MaxFiles      = 1000
	MaxFilesBytes = 16 << 20 // all input files of one job together
	MaxStdin      = 8 << 20
	MaxArgs       = 1024
	MaxPriority   = 100
	MaxTenantLen  = 64
	// A step's command: its arguments, the job's and its own environment
	// and its working directory, as its sandbox receives them (below
	// execve's 2 MiB and shoal-init's MAX_CMD); one argument or variable
	// at most what execve takes (MAX_ARG_STRLEN).
	MaxEnv      = 1024
	MaxArgBytes = 128 << 10
	MaxCmdBytes = 1 << 20
	MaxNameLen  = 256  // a step's name
	MaxBatch    = 1000 // jobs submitted together
)

// CheckBatch refuses a batch of more than MaxBatch jobs.
func CheckBatch(n int) error {
	if n > MaxBatch {
		return errdefs.Invalid("jobs", "%d jobs are more than %d in one batch", n, MaxBatch)
	}
	return nil
}

// checkCmd bounds a step's command as its sandbox receives it.
func checkCmd(req types.JobRequest, s types.JobStep, sf, jobEnv string) error {
	if len(req.Env)+len(s.Env) > MaxEnv {
		return errdefs.Invalid(sf+"env", "%d variables with the job's are more than %d", len(req.Env)+len(s.Env), MaxEnv)
	}
	if len(s.Name) > MaxNameLen {
		return errdefs.Invalid(sf+"name", "%d bytes are more than %d", len(s.Name), MaxNameLen)
	}
	n := len(s.Workdir) + 1
	for _, l := range []struct {
		field string
		list  []string
	}{{sf + "args", s.Args}, {sf + "env", s.Env}, {jobEnv, req.Env}} {
		field := l.field
		for i, a := range l.list {
			if len(a) > MaxArgBytes {
				return errdefs.Invalid(fmt.Sprintf("%s[%d]", field, i), "%d bytes are more than %d", len(a), MaxArgBytes)
			}
			n += len(a) + 1
		}
	}
	if n > MaxCmdBytes {
		return errdefs.Invalid(sf+"args", "the command with its environment is %d bytes, more than %d", n, MaxCmdBytes)
	}
	return nil
}

// Limits are one step's parsed limits.
type Limits struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
	Timeout     time.Duration
	CPUTime     time.Duration
	OutputBytes int64
	WorkBytes   int64
	TmpBytes    int64
}

// DefaultLimits apply where a submission names none.
var DefaultLimits = Limits{
	MemoryBytes: 256 << 20,
	CPUs:        1,
	Pids:        64,
	Timeout:     10 * time.Second,
	OutputBytes: 64 << 10,
	WorkBytes:   64 << 20,
	TmpBytes:    16 << 20,
}

// Ceilings no submission may exceed.
var maxLimits = Limits{
	MemoryBytes: 8 << 30,
	CPUs:        64,
	Pids:        4096,
	Timeout:     time.Hour,
	CPUTime:     time.Hour,
	OutputBytes: 16 << 20,
	WorkBytes:   4 << 30,
	TmpBytes:    1 << 30,
}

// Step is a validated step.
type Step struct {
	types.JobStep
	Limits Limits
}

// Plan is a validated job request.
type Plan struct {
	Req    types.JobRequest
	Steps  []Step
	Work   int64 // work directory size
	Tenant string
}

// NewPlan validates req; field names in errors are prefixed with prefix
// ("" or "jobs[3].").
func NewPlan(req types.JobRequest, prefix string) (*Plan, error) {
	f := func(name string) string { return prefix + name }
	if strings.TrimSpace(req.Image) == "" {
		return nil, errdefs.Invalid(f("image"), "is required")
	}
	if req.Tenant == "" {
		req.Tenant = "default"
	}
	if err := validName(req.Tenant); err != nil {
		return nil, errdefs.Invalid(f("tenant"), "%q: %v", req.Tenant, err)
	}
	if req.Priority < -MaxPriority || req.Priority > MaxPriority {
		return nil, errdefs.Invalid(f("priority"), "%d is outside -%d..%d", req.Priority, MaxPriority, MaxPriority)
	}
	if req.Callback != "" {
		u, err := url.Parse(req.Callback)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, errdefs.Invalid(f("callback"), "%q is not an http or https URL", req.Callback)
		}
	}
	if err := validEnv(req.Env, f("env")); err != nil {
		return nil, err
	}
	if err := validFiles(req.Files, f("files")); err != nil {
		return nil, err
	}
	base, err := parseLimits(DefaultLimits, &req.Limits, f("limits"))
	if err != nil {
		return nil, err
	}
	if len(req.Steps) == 0 {
		return nil, errdefs.Invalid(f("steps"), "at least one step is needed")
	}
	if len(req.Steps) > MaxSteps {
		return nil, errdefs.Invalid(f("steps"), "%d steps are more than %d", len(req.Steps), MaxSteps)
	}
	p := &Plan{Req: req, Work: base.WorkBytes, Tenant: req.Tenant}
	for i, s := range req.Steps {
		sf := fmt.Sprintf("%ssteps[%d].", prefix, i)
		if len(s.Args) == 0 || s.Args[0] == "" {
			return nil, errdefs.Invalid(sf+"args", "a command is needed")
		}
		if len(s.Args) > MaxArgs {
			return nil, errdefs.Invalid(sf+"args", "%d arguments are more than %d", len(s.Args), MaxArgs)
		}
		for _, a := range s.Args {
			if strings.IndexByte(a, 0) >= 0 {
				return nil, errdefs.Invalid(sf+"args", "an argument contains a NUL byte")
			}
		}
		if err := validEnv(s.Env, sf+"env"); err != nil {
			return nil, err
		}
		if err := checkCmd(req, s, sf, f("env")); err != nil {
			return nil, err
		}
		if len(s.Stdin) > MaxStdin {
			return nil, errdefs.Invalid(sf+"stdin", "%d bytes are more than %d", len(s.Stdin), MaxStdin)
		}
		if s.Workdir != "" && (!path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir || strings.IndexByte(s.Workdir, 0) >= 0) {
			return nil, errdefs.Invalid(sf+"workdir", "%q is not a clean absolute path", s.Workdir)
		}
		switch s.If {
		case "", "always", "success":
		default:
			return nil, errdefs.Invalid(sf+"if", "%q is neither always nor success", s.If)
		}
		for _, c := range s.OKCodes {
			if c < 0 || c > 255 {
				return nil, errdefs.Invalid(sf+"ok_codes", "%d is not an exit code (0..255)", c)
			}
		}
		l := base
		if s.Limits != nil {
			if s.Limits.WorkSize != "" {
				return nil, errdefs.Invalid(sf+"limits.work_size", "the work directory is shared by every step: set it in the job's limits")
			}
			if l, err = parseLimits(base, s.Limits, sf+"limits"); err != nil {
				return nil, err
			}
		}
		p.Steps = append(p.Steps, Step{JobStep: s, Limits: l})
	}
	return p, nil
}

// parseLimits overlays the non-zero fields of in onto base.
func parseLimits(base Limits, in *types.JobLimits, field string) (Limits, error) {
	l := base
	size := func(name, v string, dst *int64, min, max int64) error {
		if v == "" {
			return nil
		}
		n, err := units.ParseBytes(v)
		if err != nil {
			return errdefs.Invalid(field+"."+name, "%v", err)
		}
		if n < min || n > max {
			return errdefs.Invalid(field+"."+name, "%s is outside %s..%s", v, units.FormatBytes(min), units.FormatBytes(max))
		}
		*dst = n
		return nil
	}
	dur := func(name, v string, dst *time.Duration, max time.Duration) error {
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return errdefs.Invalid(field+"."+name, "%q is not a duration such as 2s", v)
		}
		if d <= 0 || d > max {
			return errdefs.Invalid(field+"."+name, "%s is outside 0..%s", v, max)
		}
		*dst = d
		return nil
	}
	if err := size("memory", in.Memory, &l.MemoryBytes, 4<<20, maxLimits.MemoryBytes); err != nil {
		return l, err
	}
	if err := size("output", in.Output, &l.OutputBytes, 0, maxLimits.OutputBytes); err != nil {
		return l, err
	}
	if err := size("work_size", in.WorkSize, &l.WorkBytes, 1<<20, maxLimits.WorkBytes); err != nil {
		return l, err
	}
	if err := size("tmp_size", in.TmpSize, &l.TmpBytes, 1<<20, maxLimits.TmpBytes); err != nil {
		return l, err
	}
	if err := dur("timeout", in.Timeout, &l.Timeout, maxLimits.Timeout); err != nil {
		return l, err
	}
	if err := dur("cpu_time", in.CPUTime, &l.CPUTime, maxLimits.CPUTime); err != nil {
		return l, err
	}
	switch c := in.CPUs; {
	case math.IsNaN(c) || math.IsInf(c, 0) || c < 0:
		return l, errdefs.Invalid(field+".cpus", "%v is not a positive number of cores", c)
	case c > 0 && (c < 0.01 || c > maxLimits.CPUs):
		return l, errdefs.Invalid(field+".cpus", "%v is outside 0.01..%v", c, maxLimits.CPUs)
	case c > 0:
		l.CPUs = c
	}
	switch p := in.Pids; {
	case p < 0:
		return l, errdefs.Invalid(field+".pids", "%d is negative", p)
	case p > maxLimits.Pids:
		return l, errdefs.Invalid(field+".pids", "%d is above %d", p, maxLimits.Pids)
	case p > 0:
		l.Pids = p
	}
	return l, nil
}

// CPUTimeLimit is the step's CPU time limit: its own, or its wall time
// times its CPU quota.
func (l Limits) CPUTimeLimit() time.Duration {
	if l.CPUTime > 0 {
		return l.CPUTime
	}
	return time.Duration(float64(l.Timeout) * math.Max(l.CPUs, 1))
}

func validName(s string) error {
	if s == "" || len(s) > MaxTenantLen {
		return fmt.Errorf("must be 1 to %d characters", MaxTenantLen)
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || (i > 0 && (c == '-' || c == '_' || c == '.'))
		if !ok {
			return fmt.Errorf("only letters, digits and -_. (not first) are allowed")
		}
	}
	return nil
}

func validEnv(env []string, field string) error {
	for i, e := range env {
		if !strings.Contains(e, "=") || strings.HasPrefix(e, "=") || strings.IndexByte(e, 0) >= 0 {
			return errdefs.Invalid(fmt.Sprintf("%s[%d]", field, i), "%q is not NAME=value", e)
		}
	}
	return nil
}

// validFiles checks input file names: relative, clean, inside the work
// directory, and the total size.
func validFiles(files map[string][]byte, field string) error {
	if len(files) > MaxFiles {
		return errdefs.Invalid(field, "%d files are more than %d", len(files), MaxFiles)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var total int64
	for _, n := range names {
		ff := fmt.Sprintf("%s[%q]", field, n)
		if err := validFileName(n); err != nil {
			return errdefs.Invalid(ff, "%v", err)
		}
		total += int64(len(files[n]))
		if total > MaxFilesBytes {
			return errdefs.Invalid(ff, "the files add up to more than %s", units.FormatBytes(MaxFilesBytes))
		}
	}
	return nil
}

func validFileName(n string) error {
	switch {
	case n == "" || len(n) > 255:
		return fmt.Errorf("a file name must be 1 to 255 bytes")
	case strings.IndexByte(n, 0) >= 0 || strings.Contains(n, `\`):
		return fmt.Errorf("a file name must not contain NUL or backslash")
	case path.IsAbs(n):
		return fmt.Errorf("%q is absolute; name a path inside the work directory", n)
	case path.Clean(n) != n || n == "." || n == ".." || strings.HasPrefix(n, "../"):
		return fmt.Errorf("%q is not a clean path inside the work directory", n)
	case strings.Count(n, "/") > 16:
		return fmt.Errorf("%q is nested too deep", n)
	}
	return nil
}
