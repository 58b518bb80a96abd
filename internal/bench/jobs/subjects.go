package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// bareProcess runs busybox echo hello on the host with its output to a
// pipe, as a job's step is captured.
func bareProcess(ctx context.Context, busybox string) (map[string]time.Duration, error) {
	out, err := exec.CommandContext(ctx, busybox, "echo", "hello").Output()
	if err != nil {
		return nil, fmt.Errorf("bare process %s echo hello: %w", busybox, err)
	}
	if string(out) != "hello\n" {
		return nil, fmt.Errorf("bare process %s echo hello: printed %q, want \"hello\\n\"", busybox, out)
	}
	return nil, nil
}

// startBefore starts the earlier shoal binary bin (copied into dir, as
// the original may be shared) on a network and cgroup parent of its own,
// with the bench image built from rootfs.
func startBefore(ctx context.Context, o bench.Options, bin, dir, rootfs string) (*kit.Daemon, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("SHOAL_BENCH_BEFORE: %w", err)
	}
	own := filepath.Join(dir, "shoal")
	if err := os.WriteFile(own, b, 0o755); err != nil {
		return nil, err
	}
	// A shoal-init beside the earlier binary goes with it: that daemon
	// then keeps sandboxes warm as it would installed.
	if init, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "shoal-init")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "shoal-init"), init, 0o755); err != nil {
			return nil, err
		}
	}
	o.Logf("jobs: starting the earlier %s daemon", bin)
	d, err := kit.StartDaemonOn(ctx, own, filepath.Join(dir, "daemon"), beforeNet)
	if err != nil {
		return nil, err
	}
	if _, err := d.CLI(ctx, "image", "build", rootfs, "--tag", kit.BenchImage); err != nil {
		d.Close(ctx)
		return nil, err
	}
	return d, nil
}

// jobsNet is the suite's daemon's network and cgroup parent, apart from
// the lifecycle suite's (go test ./... runs the two packages' quick tests
// side by side; a bridge is also a policy table of the same name).
var jobsNet = kit.DaemonNet{Bridge: "shoalbj0", Subnet: "10.190.0.0/16", CgroupParent: "/shoal-bench-jobs"}

// beforeNet keeps the earlier daemon apart from this suite's.
var beforeNet = kit.DaemonNet{Bridge: "shoalbj1", Subnet: "10.189.0.0/16", CgroupParent: "/shoal-bench-jobs-before"}

// postJob submits the job body with ?wait=true and returns its result.
func postJob(ctx context.Context, e *kit.Daemon, body string) (types.Job, error) {
	var j types.Job
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://shoal/v1/jobs?wait=true", strings.NewReader(body))
	if err != nil {
		return j, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return j, fmt.Errorf("POST /v1/jobs: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return j, fmt.Errorf("POST /v1/jobs: %s: %s", resp.Status, bench.OneLine(string(raw)))
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return j, fmt.Errorf("POST /v1/jobs: %w", err)
	}
	return j, nil
}

// helloJob submits a hello-world job and waits for its result.
func helloJob(ctx context.Context, e *kit.Daemon, i int) (map[string]time.Duration, error) {
	j, err := postJob(ctx, e, `{"image":"`+kit.BenchImage+`","steps":[{"args":["echo","hello"]}]}`)
	if err != nil {
		return nil, err
	}
	if !j.OK || len(j.Steps) != 1 || j.Steps[0].Stdout != "hello\n" {
		return nil, fmt.Errorf("job %s: %s %+v", j.ID, j.State, j.Steps)
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	s := j.Steps[0]
	return map[string]time.Duration{
		"queue": ms(j.QueueMs), kit.PhaseCreate: ms(s.CreateMs), kit.PhaseStart: ms(s.StartMs), kit.PhaseExec: ms(s.ExecMs),
	}, nil
}

// teardownMetric reads the sum and count of the daemon's teardown timings.
func teardownMetric(ctx context.Context, e *kit.Daemon) (sum, count float64) {
	resp, err := e.Get(ctx, "/metrics")
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		var v float64
		if _, err := fmt.Sscanf(line, `shoal_job_step_phase_seconds_sum{phase="teardown"} %g`, &v); err == nil {
			sum = v
		}
		if _, err := fmt.Sscanf(line, `shoal_job_step_phase_seconds_count{phase="teardown"} %g`, &v); err == nil {
			count = v
		}
	}
	return sum, count
}

// runCaptured runs `runc run` in the foreground with stdout and stderr to
// pipes read by this process, and checks the output; safe for concurrent
// use.
func runCaptured(ctx context.Context, b *kit.Runc, i int) (map[string]time.Duration, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, b.Bin, "--root", b.Root, "run", "--bundle", b.Bundle, b.ID(i))
	cmd.Dir = b.Bundle
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("runc run: %w: %s", err, bench.OneLine(errb.String()))
	}
	if out.String() != "hello\n" {
		return nil, fmt.Errorf("runc run printed %q", out.String())
	}
	return nil, nil
}
