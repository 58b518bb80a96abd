package stateful

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// Load around each kill: sysbench runs in chunks of sbChunk from killAt
// before the kill until the cluster is whole again.
const (
	sbChunk      = 10 * time.Second
	sbThreads    = 4
	killAt       = 10 * time.Second
	killAtQuick  = 5 * time.Second
	recoverLimit = 10 * time.Minute
)

// failover kills the mariadbd of one member (ordinal (i-1) mod 3: the
// first run's is galera-0, the one that started the cluster) under
// sysbench and a writer through the proxy, and returns the time from the
// kill until the cluster has 3 synced members again. Every row the writer
// saw committed must then be on every member.
func (e *env) failover(ctx context.Context, i int) (time.Duration, runSide, error) {
	side := runSide{sbTxns: -1, sbFailed: -1}
	if err := e.waitSynced(ctx, recoverLimit); err != nil {
		return 0, side, err
	}
	a, err := e.Status(ctx, "galera")
	if err != nil {
		return 0, side, err
	}
	ord := (i - 1) % 3
	var victim types.Replica
	for _, r := range a.Replicas {
		if r.Ordinal != nil && *r.Ordinal == ord {
			victim = r
		}
	}
	if victim.ID == "" {
		return 0, side, fmt.Errorf("galera: no replica of ordinal %d", ord)
	}
	side.victim = fmt.Sprintf("galera-%d", ord)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var committed []int
	wg.Add(2)
	go func() { // sysbench, a chunk at a time
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			txns, failed, ok := e.sysbenchChunk(ctx)
			mu.Lock()
			if !ok {
				side.sbCrashed++
			} else {
				side.sbTxns, side.sbFailed = max(side.sbTxns, 0)+txns, max(side.sbFailed, 0)+failed
			}
			mu.Unlock()
		}
	}()
	go func() { // the writer: one INSERT a statement, each commit seen kept
		defer wg.Done()
		for k := 1; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			id := i*1_000_000 + k
			_, err := e.sql(e.route, fmt.Sprintf("INSERT INTO committed VALUES (%d, %d)", id, i))
			mu.Lock()
			side.wAttempts++
			if err == nil {
				committed = append(committed, id)
			} else {
				side.wFailed++
			}
			mu.Unlock()
		}
	}()
	end := func() {
		close(stop)
		wg.Wait()
	}

	wait := killAt
	if e.quick {
		wait = killAtQuick
	}
	time.Sleep(wait)
	// mariadbd is the child of the replica's init.
	out, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", victim.Pid, victim.Pid))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || pid == 0 || strings.TrimSpace(string(comm)) != "mariadbd" {
		end()
		return 0, side, fmt.Errorf("galera: the mariadbd of %s (init pid %d): %v %q", victim.ID, victim.Pid, err, out)
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		end()
		return 0, side, fmt.Errorf("galera: kill mariadbd %d: %w", pid, err)
	}
	e.Opts.Logf("galera: killed the mariadbd (pid %d) of %s", pid, victim.ID)
	err = e.WaitFor(ctx, "galera", recoverLimit, "a new replica of "+side.victim, func(a types.App) bool {
		for _, r := range a.Replicas {
			if r.Ordinal != nil && *r.Ordinal == ord && r.ID != victim.ID {
				return true
			}
		}
		return false
	})
	if err == nil {
		err = e.waitSynced(ctx, recoverLimit)
	}
	d := time.Since(t0)
	end()
	if err != nil {
		return 0, side, err
	}
	e.Opts.Logf("galera: 3 synced members %v after the kill of %s", d.Round(time.Second), side.victim)

	// No row the writer saw committed is lost, on any member.
	if len(committed) == 0 {
		return 0, side, fmt.Errorf("galera: the writer committed no row (%d attempts)", side.wAttempts)
	}
	a, err = e.Status(ctx, "galera")
	if err != nil {
		return 0, side, err
	}
	for _, r := range a.Replicas {
		out, err := e.sql(memberAddr(r), fmt.Sprintf("SET SESSION wsrep_sync_wait = 1; SELECT id FROM committed WHERE run = %d", i))
		if err != nil {
			return 0, side, err
		}
		have := map[string]bool{}
		for _, f := range strings.Fields(out) {
			have[f] = true
		}
		for _, id := range committed {
			if !have[strconv.Itoa(id)] {
				return 0, side, fmt.Errorf("galera: replica %s lost row %d, committed while %s was killed", r.ID, id, side.victim)
			}
		}
	}
	side.rows = len(committed)
	return d, side, nil
}

// sysbenchChunk runs sysbench oltp_read_write for sbChunk through the
// proxy, errors ignored (counted), and returns its transactions and
// ignored errors; ok is false when it ended without its summary (sysbench
// 1.0.20 may crash in its reconnect after a member is killed).
func (e *env) sysbenchChunk(ctx context.Context) (txns, failed int, ok bool) {
	// A client whose connection the kill resets must not die of SIGPIPE.
	args := append(e.sysbenchArgs(), "--threads="+strconv.Itoa(sbThreads), "--time="+strconv.Itoa(int(sbChunk/time.Second)),
		"--mysql-ignore-errors=all", "oltp_read_write", "run")
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", `trap '' PIPE; exec sysbench "$@"`, "sysbench"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Minute
	err := cmd.Run()
	txns, failed = sbCount(out.String(), "transactions"), sbCount(out.String(), "ignored errors")
	if err != nil || txns < 0 || failed < 0 {
		e.Opts.Logf("galera: sysbench ended without a summary: %v", err)
		return 0, 0, false
	}
	e.Opts.Logf("galera: sysbench %s: %d transactions, %d ignored errors", sbChunk, txns, failed)
	return txns, failed, true
}

// sbCount reads a count of sysbench's summary ("transactions: 1224
// (...)"); -1 when it has none.
func sbCount(out, what string) int {
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(what) + `:\s+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
