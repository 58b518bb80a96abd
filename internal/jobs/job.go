package jobs

import (
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// Job is a job as the Manager keeps it and stores it (in a record under
// store.JobKey): what was asked, where it is, and once finished how each
// step ended. Its JSON is the stored format: a field keeps its name, so
// that every record a daemon wrote still decodes. The API shows it as a
// types.Job (Wire).
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

// Job states.
const (
	Queued    = "queued"
	Running   = "running"
	Done      = "done"      // every step ran or was skipped; see OK
	Cancelled = "cancelled" // cancelled before or while it ran
	Failed    = "failed"    // the platform could not run it (see Error)
	// Lost: the job's node was lost while it ran, as many times as a job
	// may be tried (see Error); it is not run again.
	Lost = "lost"
)

// StepResult is how one step of a job ended, as stored.
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

// Wire returns j as the API shows it (and a callback receives it).
func (j Job) Wire() types.Job {
	w := types.Job{
		ID: j.ID, Tenant: j.Tenant, Priority: j.Priority, Image: j.Image,
		State: j.State, OK: j.OK, Error: j.Error, Attempts: j.Attempts,
		Submitted: j.Submitted, Started: j.Started, Finished: j.Finished,
		QueueMs: j.QueueMs, Callback: j.Callback, CallbackState: j.CallbackState,
		Node: j.Node, Requeued: j.Requeued,
	}
	if j.Steps != nil {
		w.Steps = make([]types.StepResult, len(j.Steps))
		for i, s := range j.Steps {
			w.Steps[i] = types.StepResult(s)
		}
	}
	return w
}

// WireJobs returns jobs as the API shows them.
func WireJobs(js []Job) []types.Job {
	if js == nil {
		return nil
	}
	out := make([]types.Job, len(js))
	for i, j := range js {
		out[i] = j.Wire()
	}
	return out
}
