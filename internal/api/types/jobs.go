package types

import (
	"errors"
	"time"
)

// JobRequest is the body of POST /v1/jobs (a JSON array of them submits a
// batch). Limits are the defaults of every step; a step's own limits
// override them field by field.
type JobRequest struct {
	Image string    `json:"image"`
	Steps []JobStep `json:"steps"`
	// Files are written into the work directory (/work) before the first
	// step: relative path → content (base64 in JSON).
	Files map[string][]byte `json:"files,omitempty"`
	Env   []string          `json:"env,omitempty"`
	// Tenant shares the machine fairly with other tenants ("default" if empty).
	Tenant string `json:"tenant,omitempty"`
	// Priority orders a tenant's own jobs: higher first (-100..100).
	Priority int       `json:"priority,omitempty"`
	Limits   JobLimits `json:"limits,omitempty"`
	// Callback, if set, is an http(s) URL that receives the finished job
	// as JSON (POST), retried with back-off until it answers 2xx.
	Callback string `json:"callback,omitempty"`
}

// JobStep is one command of a job. Steps run one after another in fresh
// sandboxes that share the job's work directory.
type JobStep struct {
	Name string   `json:"name,omitempty"`
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	// Stdin is the step's standard input (base64 in JSON).
	Stdin []byte `json:"stdin,omitempty"`
	// Workdir is the step's working directory (default /work).
	Workdir string     `json:"workdir,omitempty"`
	Limits  *JobLimits `json:"limits,omitempty"`
	// OKCodes are the exit codes that count as ok (default [0]).
	OKCodes []int `json:"ok_codes,omitempty"`
	// If is "always" (default: run whatever earlier steps did) or
	// "success" (run only if every earlier step ended ok).
	If string `json:"if,omitempty"`
}

// JobLimits bound a step. Sizes take units ("64Mi"), durations Go syntax
// ("2s"). Zero values mean the default.
type JobLimits struct {
	Memory  string  `json:"memory,omitempty"`   // default 256Mi; swap is off
	CPUs    float64 `json:"cpus,omitempty"`     // CPU quota in cores (default 1)
	Pids    int64   `json:"pids,omitempty"`     // default 64
	Timeout string  `json:"timeout,omitempty"`  // wall time (default 10s)
	CPUTime string  `json:"cpu_time,omitempty"` // CPU time of the whole step (default: the wall time)
	Output  string  `json:"output,omitempty"`   // cap of stdout and of stderr, each (default 64Ki)
	// WorkSize caps the work directory (job-wide; default 64Mi) and TmpSize
	// each step's /tmp (default 16Mi).
	WorkSize string `json:"work_size,omitempty"`
	TmpSize  string `json:"tmp_size,omitempty"`
}

// Job states.
const (
	JobQueued    = "queued"
	JobRunning   = "running"
	JobDone      = "done"      // every step ran or was skipped; see OK
	JobCancelled = "cancelled" // cancelled before or while it ran
	JobFailed    = "failed"    // the platform could not run it (see Error)
	JobLost      = "lost"      // its node was lost each time it ran (see Error)
)

// Step statuses.
const (
	StepOK            = "ok"
	StepNonzeroExit   = "nonzero_exit"
	StepTimeout       = "timeout" // wall time or CPU time limit
	StepOOM           = "oom"
	StepOutputLimit   = "output_limit"
	StepKilled        = "killed" // cancelled, or the daemon stopped
	StepInternalError = "internal_error"
	StepSkipped       = "skipped" // an earlier step failed and If is "success"
)

// Job is a submitted job and, once finished, its result.
type Job struct {
	ID        string       `json:"id"`
	Tenant    string       `json:"tenant"`
	Priority  int          `json:"priority"`
	Image     string       `json:"image"`
	State     string       `json:"state"`
	OK        bool         `json:"ok"` // every step that ran ended ok
	Error     string       `json:"error,omitempty"`
	Attempts  int          `json:"attempts"`
	Submitted time.Time    `json:"submitted"`
	Started   *time.Time   `json:"started,omitempty"`
	Finished  *time.Time   `json:"finished,omitempty"`
	Steps     []StepResult `json:"steps,omitempty"`
	// QueueMs is the time from submission to the start of the first step.
	QueueMs  float64 `json:"queue_ms"`
	Callback string  `json:"callback,omitempty"`
	// CallbackState is "pending", "delivered" or "failed".
	CallbackState string `json:"callback_state,omitempty"`
	// Node is the cluster node the job is assigned to or ran on (empty on
	// a single host and while it waits for a node).
	Node string `json:"node,omitempty"`
	// Requeued says why the job was queued again after it had been given
	// to a node (its node was lost, or stopped while it ran).
	Requeued string `json:"requeued,omitempty"`
}

// StepResult is how one step ended.
type StepResult struct {
	Name            string  `json:"name,omitempty"`
	Status          string  `json:"status"`
	ExitCode        int     `json:"exit_code"`
	Signal          string  `json:"signal,omitempty"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdout_truncated,omitempty"`
	StderrTruncated bool    `json:"stderr_truncated,omitempty"`
	Error           string  `json:"error,omitempty"`
	WallMs          float64 `json:"wall_ms"`
	CPUMs           float64 `json:"cpu_ms"`
	MemoryPeak      uint64  `json:"memory_peak_bytes"`
	// Where the time went: preparing the sandbox, starting its process
	// (the OCI runtime), running it, and removing it.
	CreateMs   float64 `json:"create_ms"`
	StartMs    float64 `json:"start_ms"`
	ExecMs     float64 `json:"exec_ms"`
	TeardownMs float64 `json:"teardown_ms"`
}

// JobFilter selects jobs for GET /v1/jobs.
type JobFilter struct {
	Tenant string
	State  string
	Limit  int
}

// ErrQuota is returned when a tenant has too many jobs queued; the API
// answers 429.
var ErrQuota = errors.New("tenant quota exceeded")

// MaxJobBody bounds the body of POST /v1/jobs.
const MaxJobBody = 64 << 20
