package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
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

// Jobs is what the API needs of the job service. Submit validates and
// queues every request or none; Wait blocks until the job has finished or
// ctx ends.
type Jobs interface {
	Submit(ctx context.Context, reqs []JobRequest) ([]Job, error)
	Get(ctx context.Context, id string) (Job, error)
	Wait(ctx context.Context, id string) (Job, error)
	List(ctx context.Context, f JobFilter) ([]Job, error)
	Cancel(ctx context.Context, id string) (Job, error)
}

// ErrQuota is returned when a tenant has too many jobs queued; the API
// answers 429.
var ErrQuota = errors.New("tenant quota exceeded")

// MaxJobBody bounds the body of POST /v1/jobs.
const MaxJobBody = 64 << 20

func (s *Server) registerJobs(mux *http.ServeMux) {
	if s.Jobs == nil {
		return
	}
	mux.HandleFunc("POST /v1/jobs", s.submitJobs)
	mux.HandleFunc("GET /v1/jobs", s.listJobs)
	mux.HandleFunc("GET /v1/jobs/{id}", s.getJob)
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", s.cancelJob)
}

func (s *Server) jobFail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrQuota) {
		httperr.Write(w, http.StatusTooManyRequests, err, "tenant")
		return
	}
	s.fail(w, r, err)
}

func (s *Server) submitJobs(w http.ResponseWriter, r *http.Request) {
	wait, err := boolParam(r, "wait")
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJobBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			httperr.Write(w, http.StatusRequestEntityTooLarge, errors.New("request body is above "+strconv.Itoa(MaxJobBody>>20)+" MiB"), "body")
			return
		}
		s.jobFail(w, r, errdefs.Invalid("body", "%v", err))
		return
	}
	batch := bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("["))
	var reqs []JobRequest
	var derr error
	if batch {
		derr = decodeStrict(body, &reqs)
	} else {
		var one JobRequest
		derr = decodeStrict(body, &one)
		reqs = []JobRequest{one}
	}
	if derr != nil {
		s.jobFail(w, r, derr)
		return
	}
	jobs, err := s.Jobs.Submit(r.Context(), reqs)
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	code := http.StatusAccepted
	if wait {
		for i := range jobs {
			j, err := s.Jobs.Wait(r.Context(), jobs[i].ID)
			if err != nil {
				s.jobFail(w, r, err)
				return
			}
			jobs[i] = j
		}
		code = http.StatusOK
	}
	if batch {
		httperr.WriteJSON(w, code, jobs)
		return
	}
	httperr.WriteJSON(w, code, jobs[0])
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	wait, err := boolParam(r, "wait")
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	var j Job
	if wait {
		j, err = s.Jobs.Wait(r.Context(), r.PathValue("id"))
	} else {
		j, err = s.Jobs.Get(r.Context(), r.PathValue("id"))
	}
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, j)
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := JobFilter{Tenant: q.Get("tenant"), State: q.Get("state")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			s.jobFail(w, r, errdefs.Invalid("limit", "%q is not a count", l))
			return
		}
		f.Limit = n
	}
	jobs, err := s.Jobs.List(r.Context(), f)
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, jobs)
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	j, err := s.Jobs.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, j)
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.Invalid(name, "%q is not true or false", v)
	}
	return b, nil
}

// decodeStrict decodes JSON, refusing unknown fields and naming the field
// of a type mismatch.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field := "body"
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			field = ute.Field
		} else if strings.HasPrefix(err.Error(), "json: unknown field ") {
			field = strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		}
		return errdefs.Invalid(field, "malformed request: %v", err)
	}
	return nil
}
