package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api"
)

func init() { extraCommands = append(extraCommands, newJobCmd) }

func newJobCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Run untrusted code in sandboxed jobs with hard limits",
		Long: `A job runs one or more steps (commands) of an image in sandboxes with no
network, a read-only image, a size-capped work directory (/work) shared by the
steps, and hard limits on memory, CPU, processes, time and output. Jobs queue
persistently, fairly between tenants, and by priority within a tenant.`,
	}
	cmd.AddCommand(newJobRunCmd(g, true), newJobRunCmd(g, false), newJobGetCmd(g), newJobLsCmd(g), newJobCancelCmd(g))
	return cmd
}

// jobFlags build a one-step job request from the command line, or read a
// whole request (several steps) from --file-json.
type jobFlags struct {
	req       api.JobRequest
	step      api.JobStep
	lim       api.JobLimits
	files     []string
	stdin     string
	fromJSON  string
	maxOutput string
}

func (f *jobFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.StringVarP(&f.lim.Memory, "memory", "m", "", "memory limit of each step, e.g. 64Mi (default 256Mi, no swap)")
	fl.Float64Var(&f.lim.CPUs, "cpus", 0, "CPU quota in cores (default 1)")
	fl.Int64Var(&f.lim.Pids, "pids", 0, "maximum number of processes (default 64)")
	fl.StringVar(&f.lim.Timeout, "timeout", "", "wall time limit of each step, e.g. 2s (default 10s)")
	fl.StringVar(&f.lim.CPUTime, "cpu-time", "", "CPU time limit of each step (default: timeout × cpus)")
	fl.StringVar(&f.maxOutput, "max-output", "", "cap of stdout and of stderr, each (default 64Ki)")
	fl.StringVar(&f.lim.WorkSize, "work-size", "", "size of the work directory /work (default 64Mi)")
	fl.StringArrayVar(&f.files, "file", nil, "input file PATH=LOCAL, written to /work/PATH (repeatable)")
	fl.StringVar(&f.stdin, "stdin", "", "file whose content is the step's stdin (- for this command's stdin)")
	fl.StringArrayVarP(&f.req.Env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	fl.StringVar(&f.req.Tenant, "tenant", "", "tenant the job is accounted to (default \"default\")")
	fl.IntVar(&f.req.Priority, "priority", 0, "priority within the tenant, -100..100 (higher first)")
	fl.StringVar(&f.req.Callback, "callback", "", "URL that receives the finished job (POST, JSON)")
	fl.StringVarP(&f.fromJSON, "from", "f", "", "read the whole job request (JSON, several steps) from this file (- for stdin)")
}

func (f *jobFlags) build(cmd *cobra.Command, args []string) (api.JobRequest, error) {
	if f.fromJSON != "" {
		if len(args) > 0 {
			return api.JobRequest{}, usageErrorf("--from %s: give either a request file or IMAGE CMD..., not both", f.fromJSON)
		}
		b, err := readInput(cmd, f.fromJSON)
		if err != nil {
			return api.JobRequest{}, usageErrorf("--from: %v", err)
		}
		var req api.JobRequest
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return api.JobRequest{}, usageErrorf("--from %s: %v", f.fromJSON, err)
		}
		return req, nil
	}
	if len(args) < 1 || len(commandArgs(args)) == 0 {
		return api.JobRequest{}, usageErrorf("%s needs IMAGE and a command (or --from FILE)\nRun '%s --help' for usage", cmd.CommandPath(), cmd.CommandPath())
	}
	req := f.req
	req.Image = args[0]
	f.lim.Output = f.maxOutput
	req.Limits = f.lim
	step := f.step
	step.Args = commandArgs(args)
	if f.stdin != "" {
		b, err := readInput(cmd, f.stdin)
		if err != nil {
			return req, usageErrorf("--stdin: %v", err)
		}
		step.Stdin = b
	}
	for _, spec := range f.files {
		p, local, ok := strings.Cut(spec, "=")
		if !ok || p == "" || local == "" {
			return req, usageErrorf("--file %q: use PATH=LOCAL", spec)
		}
		b, err := os.ReadFile(local)
		if err != nil {
			return req, usageErrorf("--file %s: %v", spec, err)
		}
		if req.Files == nil {
			req.Files = map[string][]byte{}
		}
		req.Files[p] = b
	}
	req.Steps = []api.JobStep{step}
	return req, nil
}

func readInput(cmd *cobra.Command, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(cmd.InOrStdin())
	}
	return os.ReadFile(name)
}

func newJobRunCmd(g *globals, wait bool) *cobra.Command {
	var f jobFlags
	var out string
	use, short := "submit [flags] IMAGE CMD...", "Queue a job and print its id"
	if wait {
		use, short = "run [flags] IMAGE CMD...", "Run a job, wait for it and print its output and result"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Example: `  shoal job run busybox:1 echo hello
  shoal job run --memory 64Mi --timeout 2s --file main.sh=./main.sh --stdin input.txt busybox:1 sh main.sh
  shoal job submit --tenant course-a -f grading.json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			req, err := f.build(cmd, args)
			if err != nil {
				return err
			}
			path := "/v1/jobs"
			if wait {
				path += "?wait=true"
			}
			var j api.Job
			if err := g.call(cmd, "POST", path, req, &j); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), j)
			}
			if !wait {
				fmt.Fprintln(cmd.OutOrStdout(), j.ID)
				return nil
			}
			return printJobResult(cmd, j)
		},
	}
	f.add(cmd)
	outputFlag(cmd, &out)
	return cmd
}

// printJobResult writes the steps' output and a line per step that did not
// end ok, and exits like the last step that ran: its exit code, or 1.
func printJobResult(cmd *cobra.Command, j api.Job) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	code := 0
	for i, s := range j.Steps {
		io.WriteString(stdout, s.Stdout)
		io.WriteString(stderr, s.Stderr)
		name := s.Name
		if name == "" {
			name = fmt.Sprint(i)
		}
		switch s.Status {
		case api.StepOK, api.StepSkipped:
		case api.StepNonzeroExit:
			code = s.ExitCode
			if code == 0 {
				code = 1
			}
			if s.Error != "" {
				fmt.Fprintf(stderr, "shoal: job %s step %s: %s\n", j.ID, name, s.Error)
			}
		default:
			code = 1
			msg := s.Status
			if s.Error != "" {
				msg += ": " + s.Error
			}
			fmt.Fprintf(stderr, "shoal: job %s step %s: %s\n", j.ID, name, msg)
		}
		if s.StdoutTruncated || s.StderrTruncated {
			fmt.Fprintf(stderr, "shoal: job %s step %s: output truncated at its cap\n", j.ID, name)
		}
	}
	if j.State != api.JobDone {
		fmt.Fprintf(stderr, "shoal: job %s %s %s\n", j.ID, j.State, j.Error)
		return exitError{1}
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

func newJobGetCmd(g *globals) *cobra.Command {
	var out string
	var wait bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show a job and its result",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/v1/jobs/" + url.PathEscape(args[0])
			if wait {
				path += "?wait=true"
			}
			var j api.Job
			if err := g.get(cmd, out, path, &j); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), j)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "id:       %s\ntenant:   %s\nimage:    %s\nstate:    %s\nok:       %v\n", j.ID, j.Tenant, j.Image, j.State, j.OK)
			if j.Error != "" {
				fmt.Fprintf(w, "error:    %s\n", j.Error)
			}
			fmt.Fprintf(w, "queued:   %.1fms\n", j.QueueMs)
			var rows [][]string
			for i, s := range j.Steps {
				rows = append(rows, []string{fmt.Sprint(i), orDash(s.Name), s.Status, fmt.Sprint(s.ExitCode),
					fmt.Sprintf("%.1fms", s.WallMs), fmt.Sprintf("%.1fms", s.CPUMs), fmt.Sprintf("%d", s.MemoryPeak>>10) + "Ki"})
			}
			if len(rows) > 0 {
				table(w, []string{"STEP", "NAME", "STATUS", "EXIT", "WALL", "CPU", "MEMORY"}, rows)
			}
			for i, s := range j.Steps {
				if s.Error != "" {
					fmt.Fprintf(w, "step %d: %s\n", i, s.Error)
				}
			}
			return nil
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the job has finished")
	return cmd
}

func newJobLsCmd(g *globals) *cobra.Command {
	var out, tenant, state string
	var limit int
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List jobs, newest first",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if tenant != "" {
				q.Set("tenant", tenant)
			}
			if state != "" {
				q.Set("state", state)
			}
			if limit > 0 {
				q.Set("limit", fmt.Sprint(limit))
			}
			path := "/v1/jobs"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			var js []api.Job
			if err := g.get(cmd, out, path, &js); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), js)
			}
			var rows [][]string
			for _, j := range js {
				var statuses []string
				for _, s := range j.Steps {
					statuses = append(statuses, s.Status)
				}
				rows = append(rows, []string{j.ID, j.Tenant, j.Image, j.State, orDash(strings.Join(statuses, ",")), ago(j.Submitted)})
			}
			table(cmd.OutOrStdout(), []string{"ID", "TENANT", "IMAGE", "STATE", "STEPS", "SUBMITTED"}, rows)
			return nil
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's jobs")
	cmd.Flags().StringVar(&state, "state", "", "only jobs in this state: queued, running, done, cancelled, failed")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many jobs")
	return cmd
}

func newJobCancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a queued or running job",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var j api.Job
			if err := g.call(cmd, "POST", "/v1/jobs/"+url.PathEscape(args[0])+"/cancel", nil, &j); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", j.ID, j.State)
			return nil
		},
	}
}
