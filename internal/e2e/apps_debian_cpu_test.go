package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDebianApacheCPUFollowsDemand: Debian's Apache with mod_php at 0.3 of
// a core (max_cpu 0.6, one replica) under ab -c 50 through the proxy has
// its quota raised while the load runs when it uses it, and not lowered
// before the load ends: 50 requests wait on a replica that uses its whole
// quota, or most of it while its workers wait for a CPU (PSI, where its
// cgroup tells), whether or not it is throttled in 80% of its CFS
// periods. The rule judged throttling alone before: on a busy host the
// replica was throttled in under 1% of its periods and its quota was
// never raised; where it was raised, it swung back to 0.3 within 0.5-2 s
// while 50-100 requests were still in flight. Every raise names a rule
// the replica met; a replica a loaded host starves below its quota
// (its cgroup's CPU time tells) is not raised, and need not be.
func TestDebianApacheCPUFollowsDemand(t *testing.T) {
	const name = "demand-apache"
	d, proxy := startApachePHP(t, name, "0.6", "tcp = true\n")
	pid := d.runcPid(d.readyReplica(name).ID)
	if pid == 0 {
		t.Fatalf("no pid for %s's replica", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	used0 := cpuUsed(t, pid)
	began := time.Now()
	ab := exec.CommandContext(ctx, "ab", "-q", "-c", "50", "-t", "10", "-n", "50000", "-s", "60",
		"-H", "Host: "+name+".localhost", "http://"+proxy+"/")
	b, err := ab.CombinedOutput()
	ended := time.Now()
	cores := (cpuUsed(t, pid) - used0).Seconds() / ended.Sub(began).Seconds()
	if err != nil {
		t.Fatalf("ab: %v\n%s", err, b)
	}
	report := string(b)
	t.Logf("ab -c 50 -t 10 through the proxy:\n%s", abSummary(report))
	if !abNoFailures.MatchString(report) || strings.Contains(report, "Non-2xx responses") {
		t.Fatalf("requests failed under load:\n%s", report)
	}
	var raised time.Time
	for _, e := range d.events(name, "cpu") {
		t.Logf("cpu event at %s: %s", e.Time.Sub(began).Round(time.Millisecond), e.Reason)
		if e.Time.Before(began) || e.Time.After(ended) {
			continue
		}
		switch {
		case e.Inputs["to"] > e.Inputs["from"] && raised.IsZero():
			raised = e.Time
			if !raiseByRule(e.Reason) {
				t.Errorf("quota raised by no rule (throttled in 80%%, or 2+ in flight while it used 90%% of its quota, or 70%% and waited for a CPU 50%% of the time): %s", e.Reason)
			}
		case e.Inputs["to"] < e.Inputs["from"] && !raised.IsZero():
			t.Errorf("quota lowered %s into the load, 50 requests still in flight: %s", e.Time.Sub(began).Round(time.Millisecond), e.Reason)
		}
	}
	t.Logf("the replica used %.2f cores on average during the load", cores)
	// Its quota stays 0.3 until raised: using 95% of it on average, it
	// used 90% of it between some two of the decider's readings.
	if raised.IsZero() && cores >= 0.95*0.3 {
		t.Fatalf("the quota was not raised during the load (%s) though the replica used %.2f of its 0.3 cores", ended.Sub(began).Round(time.Millisecond), cores)
	}
}

var (
	throttledNote = regexp.MustCompile(`replica \S+ throttled in (\d+)% of \d+ periods: cpu`)
	demandNote    = regexp.MustCompile(`replica \S+ used (\d+)% of its [\d.]+ cpu(?: and waited for a CPU (\d+)% of the time)? with (\d+) requests in flight`)
)

// raiseByRule tells whether a cpu event's reason names a rule that
// raises a quota: throttled in 80% of its periods, or 2+ requests in
// flight while it used 90% of its quota, or 70% of it while waiting for
// a CPU 50% of the time.
func raiseByRule(reason string) bool {
	for _, m := range throttledNote.FindAllStringSubmatch(reason, -1) {
		if n, _ := strconv.Atoi(m[1]); n >= 80 {
			return true
		}
	}
	for _, m := range demandNote.FindAllStringSubmatch(reason, -1) {
		used, _ := strconv.Atoi(m[1])
		stalled, _ := strconv.Atoi(m[2])
		if n, _ := strconv.Atoi(m[3]); n >= 2 && (used >= 90 || (used >= 70 && stalled >= 50)) {
			return true
		}
	}
	return false
}

// cpuUsed is the CPU time process pid's cgroup used so far (cpuacct on
// cgroup v1, cpu.stat's usage_usec on v2).
func cpuUsed(t *testing.T, pid int) time.Duration {
	t.Helper()
	var v2 string
	for _, l := range strings.Split(procFile(t, pid, "cgroup"), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = f[2]
			continue
		}
		if !slices.Contains(strings.Split(f[1], ","), "cpuacct") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", f[1], f[2], "cpuacct.usage"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("cpuacct.usage of pid %d: %v", pid, err)
		}
		return time.Duration(n)
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		b, err := os.ReadFile(filepath.Join(root, v2, "cpu.stat"))
		if err != nil || v2 == "" {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("cpu.stat of pid %d: %v", pid, err)
				}
				return time.Duration(n) * time.Microsecond
			}
		}
	}
	t.Fatalf("no CPU time for pid %d's cgroup", pid)
	return 0
}
