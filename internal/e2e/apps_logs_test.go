package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// logLine is a line of `shoal app logs --timestamps`: "ID | TIME TEXT".
type logLine struct {
	id, text string
	at       time.Time
}

func parseLogLines(t *testing.T, out string) []logLine {
	t.Helper()
	var ls []logLine
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		id, rest, ok := strings.Cut(l, " | ")
		stamp, text, ok2 := strings.Cut(rest, " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if !ok || !ok2 || err != nil {
			t.Fatalf("not a stamped log line: %q", l)
		}
		ls = append(ls, logLine{id, text, at})
	}
	return ls
}

// lockedLines collects a command's output lines as they come.
type lockedLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLines) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *lockedLines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n") + "\n"
}

// `shoal app logs` merges the replicas' lines by the time each was written
// (stdout and stderr alike), --tail counting the merged lines, --since and
// --replica selecting; --follow goes on with new lines, those of a replica
// started after it began, and a replica's last words as it ends.
func TestAppLogsMergedAndFollowed(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(`
name = "chatty"
image = "busybox:1"
command = ["sh", "-c", "trap 'echo $SHOAL_REPLICA bye; exit 0' TERM; httpd -f -p 8080 & i=0; while true; do i=$((i+1)); echo $SHOAL_REPLICA out $i; echo $SHOAL_REPLICA err $i >&2; usleep 100000; done"]
[scale]
min = 2
max = 2
`)
	a := d.waitApp("chatty", "2 ready", func(a types.App) bool { return a.Ready == 2 })
	ids := []string{a.Replicas[0].ID, a.Replicas[1].ID}

	// Follow from the start, before the lines checked below.
	cmd := exec.Command(shoalBin, "app", "logs", "chatty", "--follow", "--tail", "1", "--timestamps")
	cmd.Env = append(os.Environ(), "SHOAL_HOST=unix://"+d.sock)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var followed lockedLines
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			followed.add(sc.Text())
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })

	// Merged: every line stamped, the stamps in order, both replicas'
	// lines interleaved (not one replica's block after the other's).
	var all []logLine
	waitFor(t, "20 lines of each replica", func() bool {
		all = parseLogLines(t, d.must("app", "logs", "chatty", "--timestamps"))
		n := map[string]int{}
		for _, l := range all {
			n[l.id]++
		}
		return n[ids[0]] >= 20 && n[ids[1]] >= 20
	})
	switches := 0
	for i := 1; i < len(all); i++ {
		if all[i].at.Before(all[i-1].at) {
			t.Fatalf("line %d is older than the line before it:\n%v\n%v", i, all[i-1], all[i])
		}
		if all[i].id != all[i-1].id {
			switches++
		}
	}
	if switches < 4 {
		t.Fatalf("the replicas' lines are not merged by time (%d switches between replicas):\n%v", switches, all)
	}
	for _, id := range ids {
		out, errs := 0, 0
		for _, l := range all {
			if l.id == id && strings.HasPrefix(l.text, id+" out ") {
				out++
			} else if l.id == id && strings.HasPrefix(l.text, id+" err ") {
				errs++
			}
		}
		if out == 0 || errs == 0 {
			t.Fatalf("replica %s: %d stdout and %d stderr lines", id, out, errs)
		}
	}

	// --tail counts merged lines; --replica keeps one replica's.
	tail := parseLogLines(t, d.must("app", "logs", "chatty", "--timestamps", "--tail", "5"))
	if len(tail) != 5 {
		t.Fatalf("--tail 5: %d lines: %v", len(tail), tail)
	}
	one := parseLogLines(t, d.must("app", "logs", "chatty", "--timestamps", "--replica", ids[1][:len(ids[1])-1]))
	if len(one) < 20 {
		t.Fatalf("--replica %s: %d lines", ids[1], len(one))
	}
	for _, l := range one {
		if l.id != ids[1] || !strings.HasPrefix(l.text, ids[1]+" ") {
			t.Fatalf("--replica %s shows %v", ids[1], l)
		}
	}
	// --since a line's time: that line and the later ones.
	mid := all[len(all)/2]
	since := parseLogLines(t, d.must("app", "logs", "chatty", "--timestamps", "--since", mid.at.Format(time.RFC3339Nano)))
	if len(since) == 0 || since[0].at.Before(mid.at) || len(since) >= len(all) {
		t.Fatalf("--since %s: %d lines from %v", mid.at.Format(time.RFC3339Nano), len(since), since[:min(len(since), 1)])
	}
	if r := d.shoal("app", "logs", "chatty", "--since", "yesterday"); r.code != 2 || !strings.Contains(r.stderr, "--since") {
		t.Fatalf("--since yesterday: exit %d %q; want 2", r.code, r.stderr)
	}

	// Following: new lines of both replicas, then those of a third
	// replica started since, then the last words of one stopped.
	last := func(id string) int {
		n := 0
		for _, l := range parseLogLines(t, followed.text()) {
			if l.id == id {
				n++
			}
		}
		return n
	}
	waitFor(t, "the followed replicas' new lines", func() bool { return last(ids[0]) >= 10 && last(ids[1]) >= 10 })
	d.must("app", "scale", "chatty", "--min", "3", "--max", "3")
	a = d.waitApp("chatty", "3 ready", func(a types.App) bool { return a.Ready == 3 })
	var third string
	for _, r := range a.Replicas {
		if r.ID != ids[0] && r.ID != ids[1] && r.State == "ready" {
			third = r.ID
		}
	}
	waitFor(t, "the new replica's lines followed from its first", func() bool {
		return strings.Contains(followed.text(), third+" | ") && strings.Contains(followed.text(), " "+third+" out 1\n")
	})
	// The first replica's app ends on SIGTERM (passed on by its init),
	// saying bye as it goes.
	for _, r := range a.Replicas {
		if r.ID == ids[0] {
			if err := syscall.Kill(r.Pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "an ended replica's last words followed", func() bool {
		return strings.Contains(followed.text(), ids[0]+" | ") && strings.Contains(followed.text(), " "+ids[0]+" bye\n")
	})

	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("logs --follow interrupted: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs --follow did not end on SIGINT")
	}
	// Each line once: no replica's counter repeats in what was followed.
	seen := map[string]bool{}
	for _, l := range parseLogLines(t, followed.text()) {
		if seen[l.id+l.text] {
			t.Fatalf("followed twice: %v", l)
		}
		seen[l.id+l.text] = true
	}
}
