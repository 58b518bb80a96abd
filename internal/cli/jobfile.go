package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
)

// jobFileHelp is the part of job run's and job submit's help about -f.
const jobFileHelp = `With -f FILE the request is read from a JSON file: one job (an object, as the
body of POST /v1/jobs) or, for job submit, a batch (an array of them, queued
all or none). Flags given with -f change what the file says:

  --tenant, --priority, --callback   replace the file's value in every job
  --env KEY=VALUE, --file PATH=LOCAL add to every job's env and files,
                                     replacing an entry of the same name
                                     (a step's own env still wins over it)
  --work-size                        sets every job's work directory size
  --memory, --cpus, --pids, --timeout, --cpu-time, --max-output
                                     set that limit of every step, over the
                                     file's job and step limits
  --stdin                            is the stdin of the file's one step; it
                                     is refused when the file has several`

// jobLimitFlags are the flags that set one field of a step's limits.
var jobLimitFlags = []string{"memory", "cpus", "pids", "timeout", "cpu-time", "max-output"}

// fromFile reads the --from file and applies the flags the user set on top
// of it. batch is true when the file holds a JSON array.
func (f *jobFlags) fromFile(cmd *cobra.Command) (reqs []types.JobRequest, batch bool, err error) {
	if f.fromJSON == "-" && f.stdin == "-" {
		return nil, false, usageErrorf("--from - and --stdin - both read standard input: give one of them a file")
	}
	b, err := readInput(cmd, f.fromJSON)
	if err != nil {
		return nil, false, usageErrorf("--from: %v", err)
	}
	reqs, batch, err = decodeJobFile(b)
	if err != nil {
		return nil, false, usageErrorf("--from %s: %v", f.fromJSON, err)
	}
	if err := f.overlay(cmd, reqs); err != nil {
		return nil, false, err
	}
	return reqs, batch, nil
}

// decodeJobFile decodes one job request or an array of them, strictly:
// unknown fields and anything after the JSON value are errors.
func decodeJobFile(b []byte) ([]types.JobRequest, bool, error) {
	batch := bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("["))
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var reqs []types.JobRequest
	var err error
	if batch {
		err = dec.Decode(&reqs)
	} else {
		var one types.JobRequest
		err = dec.Decode(&one)
		reqs = []types.JobRequest{one}
	}
	if err != nil {
		return nil, false, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("more after the first JSON value (a batch is one array)")
	}
	if len(reqs) == 0 {
		return nil, false, fmt.Errorf("the batch is empty")
	}
	return reqs, batch, nil
}

// overlay applies the flags that were set on the command line to every
// request read from a file, as jobFileHelp says.
func (f *jobFlags) overlay(cmd *cobra.Command, reqs []types.JobRequest) error {
	set := cmd.Flags().Changed
	var stdin []byte
	if set("stdin") {
		n := 0
		for _, r := range reqs {
			n += len(r.Steps)
		}
		if n != 1 {
			return usageErrorf("--stdin: %s has %d steps, and --stdin is the input of one; set each step's \"stdin\" in the file", f.fromJSON, n)
		}
		var err error
		if stdin, err = readInput(cmd, f.stdin); err != nil {
			return usageErrorf("--stdin: %v", err)
		}
	}
	files, err := f.readFiles()
	if err != nil {
		return err
	}
	for _, e := range f.req.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return usageErrorf("--env %q: use KEY=VALUE", e)
		}
	}
	f.lim.Output = f.maxOutput
	for i := range reqs {
		r := &reqs[i]
		if set("tenant") {
			r.Tenant = f.req.Tenant
		}
		if set("priority") {
			r.Priority = f.req.Priority
		}
		if set("callback") {
			r.Callback = f.req.Callback
		}
		for _, e := range f.req.Env {
			r.Env = setEnv(r.Env, e)
		}
		if len(files) > 0 && r.Files == nil {
			r.Files = map[string][]byte{}
		}
		for p, b := range files {
			r.Files[p] = b
		}
		if set("work-size") {
			r.Limits.WorkSize = f.lim.WorkSize
		}
		f.setLimits(cmd, &r.Limits)
		for j := range r.Steps {
			if r.Steps[j].Limits != nil {
				f.setLimits(cmd, r.Steps[j].Limits)
			}
			if set("stdin") {
				r.Steps[j].Stdin = stdin
			}
		}
	}
	return nil
}

// setLimits copies the limit flags that were set into l.
func (f *jobFlags) setLimits(cmd *cobra.Command, l *types.JobLimits) {
	for _, name := range jobLimitFlags {
		if !cmd.Flags().Changed(name) {
			continue
		}
		switch name {
		case "memory":
			l.Memory = f.lim.Memory
		case "cpus":
			l.CPUs = f.lim.CPUs
		case "pids":
			l.Pids = f.lim.Pids
		case "timeout":
			l.Timeout = f.lim.Timeout
		case "cpu-time":
			l.CPUTime = f.lim.CPUTime
		case "max-output":
			l.Output = f.lim.Output
		}
	}
}

// setEnv sets KEY=VALUE in env, replacing an entry of the same KEY.
func setEnv(env []string, kv string) []string {
	k, _, _ := strings.Cut(kv, "=")
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if ek, _, _ := strings.Cut(e, "="); ek != k {
			out = append(out, e)
		}
	}
	return append(out, kv)
}
