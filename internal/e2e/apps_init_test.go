package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// An app whose process neither reaps the orphans it is left with nor
// handles SIGTERM (busybox sleep after the shell execs it) runs under
// shoal-init by default: the orphans' zombies are reaped, and a SIGTERM
// sent to the replica's pid 1 reaches the app, which ends, so the replica
// is replaced. As its own pid 1 (init = false, or before init existed)
// the zombies stay and the kernel drops the SIGTERM.
func TestAppInitReapsAndForwardsSignals(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(`
name = "zombies"
image = "busybox:1"
command = ["sh", "-c", "httpd -f -p 8080 & for i in 1 2 3 4 5; do (sleep 1 &); done; exec sleep 100000"]
[scale]
min = 1
max = 1
`)
	a := d.waitApp("zombies", "ready", func(a types.App) bool { return a.Ready == 1 })
	r := a.Replicas[0]
	// The five orphans end after a second; what stays below the
	// replica's pid 1 is the app (sleep 100000) and httpd, no zombie.
	var left []string
	waitFor(t, "the orphans reaped", func() bool {
		left = descendants(r.Pid)
		return len(left) == 2 && !strings.Contains(strings.Join(left, " "), "Z")
	})
	if init := procState(r.Pid); !strings.Contains(init, "shoal-init") {
		t.Fatalf("replica's pid 1 is %q, want shoal-init", init)
	}
	if err := syscall.Kill(r.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	d.waitApp("zombies", "the app ended by SIGTERM is replaced", func(a types.App) bool {
		return a.Ready == 1 && a.Replicas[0].ID != r.ID
	})
}

// procState is the command name and state of pid ("(name) S").
func procState(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i > 0 && i+3 <= len(s) {
		return s[strings.IndexByte(s, '(') : i+3]
	}
	return s
}

// descendants lists the processes below pid ("(name) S" each).
func descendants(pid int) []string {
	var out []string
	kids, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(pid), "children"))
	for _, f := range strings.Fields(string(kids)) {
		c, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		out = append(out, procState(c))
		out = append(out, descendants(c)...)
	}
	return out
}
