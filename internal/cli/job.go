package cli

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
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

// jobFlags build a one-step job request from the command line, or read
// whole requests (several steps, or a batch of jobs) from --from and apply
// the flags that were set on top of them.
type jobFlags struct {
	req       types.JobRequest
	step      types.JobStep
	lim       types.JobLimits
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
	fl.StringVarP(&f.fromJSON, "from", "f", "", "read the job request (JSON: one job, or an array of jobs for submit) from this file (- for stdin)")
}

// requests are what the command sends: one request, or the batch a --from
// file holds (batch true: sent and answered as a JSON array).
func (f *jobFlags) requests(cmd *cobra.Command, args []string) ([]types.JobRequest, bool, error) {
	if f.fromJSON != "" {
		if len(args) > 0 {
			return nil, false, usageErrorf("--from %s: give either a request file or IMAGE CMD..., not both", f.fromJSON)
		}
		return f.fromFile(cmd)
	}
	req, err := f.build(cmd, args)
	if err != nil {
		return nil, false, err
	}
	return []types.JobRequest{req}, false, nil
}

// build makes the one-step request of IMAGE CMD... and the flags.
func (f *jobFlags) build(cmd *cobra.Command, args []string) (types.JobRequest, error) {
	if len(args) < 1 || len(commandArgs(args)) == 0 {
		return types.JobRequest{}, usageErrorf("%s needs IMAGE and a command (or --from FILE)\nRun '%s --help' for usage", cmd.CommandPath(), cmd.CommandPath())
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
	files, err := f.readFiles()
	if err != nil {
		return req, err
	}
	if len(files) > 0 {
		req.Files = files
	}
	req.Steps = []types.JobStep{step}
	return req, nil
}

// readFiles reads the --file PATH=LOCAL flags (nil if none).
func (f *jobFlags) readFiles() (map[string][]byte, error) {
	var files map[string][]byte
	for _, spec := range f.files {
		p, local, ok := strings.Cut(spec, "=")
		if !ok || p == "" || local == "" {
			return nil, usageErrorf("--file %q: use PATH=LOCAL", spec)
		}
		b, err := os.ReadFile(local)
		if err != nil {
			return nil, usageErrorf("--file %s: %v", spec, err)
		}
		if files == nil {
			files = map[string][]byte{}
		}
		files[p] = b
	}
	return files, nil
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
	cmd := &cobra.Command{
		Use:   "submit [flags] IMAGE CMD...",
		Short: "Queue a job (or a batch) and print its id",
		Long: `Queue a job and print its id; "shoal job get --wait ID" waits for its result.
A batch (-f with a JSON array of jobs) is queued all or none, and its ids are
printed one a line in the file's order. --output json prints the queued job,
or the array of a batch. The exit code is 0 once the job is queued, whatever
it does later.

` + jobFileHelp,
		Example: `  shoal job submit busybox:1 sh -c 'sleep 1; echo done'
  shoal job submit --tenant course-a --priority 5 -f grading.json
  shoal job submit --tenant course-b -f batch.json     # an array: one id per line
  id=$(shoal job submit busybox:1 echo hi) && shoal job get --wait "$id"`,
	}
	if wait {
		cmd.Use, cmd.Short = "run [flags] IMAGE CMD...", "Run a job, wait for it and print its output and result"
		cmd.Long = `Run a job and wait for it. Each step's stdout and stderr are printed, and a
line on stderr names each step that did not end ok. The exit code is 0 when
every step that ran ended ok; else the exit code of the last step that
failed, or 1 when that step failed by a limit (timeout, oom, output_limit...)
or the job did not finish. --output json prints the whole job instead, and
exits with the same code. A batch is submitted with "shoal job submit".

` + jobFileHelp
		cmd.Example = `  shoal job run busybox:1 echo hello
  shoal job run --memory 64Mi --timeout 2s --file main.sh=./main.sh --stdin input.txt busybox:1 sh main.sh
  shoal job run --timeout 5s -f grading.json
  shoal job run --output json busybox:1 sh -c 'exit 3'     # prints the job, exits 3`
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(out); err != nil {
			return err
		}
		reqs, batch, err := f.requests(cmd, args)
		if err != nil {
			return err
		}
		if wait && batch {
			return usageErrorf("--from %s: a batch of %d jobs is queued with 'shoal job submit -f %s'; wait for each with 'shoal job get --wait ID'", f.fromJSON, len(reqs), f.fromJSON)
		}
		path := "/v1/jobs"
		if wait {
			path += "?wait=true"
		}
		if batch {
			var js []types.Job
			if err := g.call(cmd, "POST", path, reqs, &js); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), js)
			}
			for _, j := range js {
				fmt.Fprintln(cmd.OutOrStdout(), j.ID)
			}
			return nil
		}
		var j types.Job
		if err := g.call(cmd, "POST", path, reqs[0], &j); err != nil {
			return err
		}
		switch {
		case out == "json":
			if err := printJSON(cmd.OutOrStdout(), j); err != nil {
				return err
			}
		case !wait:
			fmt.Fprintln(cmd.OutOrStdout(), j.ID)
		default:
			printJobResult(cmd, j)
		}
		if code := jobExitCode(j); wait && code != 0 {
			return exitError{code}
		}
		return nil
	}
	f.add(cmd)
	outputFlag(cmd, &out)
	return cmd
}

// printJobResult writes the steps' output and a line per step that did not
// end ok.
func printJobResult(cmd *cobra.Command, j types.Job) {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	for i, s := range j.Steps {
		io.WriteString(stdout, s.Stdout)
		io.WriteString(stderr, s.Stderr)
		name := s.Name
		if name == "" {
			name = fmt.Sprint(i)
		}
		switch s.Status {
		case types.StepOK, types.StepSkipped:
		case types.StepNonzeroExit:
			if s.Error != "" {
				fmt.Fprintf(stderr, "shoal: job %s step %s: %s\n", j.ID, name, s.Error)
			}
		default:
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
	if j.State != types.JobDone {
		fmt.Fprintf(stderr, "shoal: job %s %s %s\n", j.ID, j.State, j.Error)
	}
}

// jobExitCode is how job run exits for a finished job: 0 when every step
// that ran ended ok; else like the last step that did not: its exit code,
// or 1 when a limit ended it; 1 when the job did not finish (cancelled,
// failed).
func jobExitCode(j types.Job) int {
	if j.State != types.JobDone {
		return 1
	}
	code := 0
	for _, s := range j.Steps {
		switch s.Status {
		case types.StepOK, types.StepSkipped:
		case types.StepNonzeroExit:
			code = s.ExitCode
			if code == 0 {
				code = 1
			}
		default:
			code = 1
		}
	}
	if code == 0 && !j.OK {
		code = 1
	}
	return code
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
			var j types.Job
			if err := g.get(cmd, out, path, &j); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), j)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "id:       %s\ntenant:   %s\nimage:    %s\nstate:    %s\nok:       %v\n", j.ID, j.Tenant, j.Image, j.State, j.OK)
			if j.Node != "" {
				fmt.Fprintf(w, "node:     %s\n", j.Node)
			}
			if j.Error != "" {
				fmt.Fprintf(w, "error:    %s\n", j.Error)
			}
			if j.Requeued != "" {
				fmt.Fprintf(w, "requeued: %s (attempts %d)\n", j.Requeued, j.Attempts)
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
			var js []types.Job
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
				rows = append(rows, []string{j.ID, j.Tenant, j.Image, j.State, orDash(j.Node), orDash(strings.Join(statuses, ",")), ago(j.Submitted)})
			}
			table(cmd.OutOrStdout(), []string{"ID", "TENANT", "IMAGE", "STATE", "NODE", "STEPS", "SUBMITTED"}, rows)
			return nil
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's jobs")
	cmd.Flags().StringVar(&state, "state", "", "only jobs in this state: queued, running, done, cancelled, failed, lost")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many jobs")
	return cmd
}

func newJobCancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a queued or running job",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var j types.Job
			if err := g.call(cmd, "POST", "/v1/jobs/"+url.PathEscape(args[0])+"/cancel", nil, &j); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", j.ID, j.State)
			return nil
		},
	}
}
