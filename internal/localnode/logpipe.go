package localnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// logWriter starts the writer of a replica's log, shoal-init's log mode
// (init is its path), on logf, and returns the pipe the replica writes its
// output to: the writer stamps each line with its time (see node.ParseLine)
// and ends once every holder of the pipe has closed it, the replica gone.
// It runs in a session of its own, outside the daemon's process group, and
// with no death signal: like the container, it outlives a restart of the
// daemon. The caller closes the pipe once the replica has it, charges the
// writer to the replica (chargeWriter) and then waits for it (so that its
// pid cannot be reused before it is charged).
func logWriter(init string, logf *os.File) (w *os.File, writer *exec.Cmd, err error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer pr.Close()
	cmd := exec.Command(init, "log")
	cmd.Stdin, cmd.Stdout = pr, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, nil, fmt.Errorf("log writer: %w", err)
	}
	return pw, cmd, nil
}

// helperAttacher is a runtime that charges a host process working for a
// container to the container's cgroup (runtime.Runtime.AttachHelper).
type helperAttacher interface {
	AttachHelper(id string, pid int) error
}

// chargeWriter moves replica id's log writer (pid) into the replica's
// cgroup, so that the CPU and memory a flood of output costs it count
// against the replica's limits, not the host's. A runtime that cannot
// leaves it where it is, as it does a writer already gone (its replica
// too).
func (n *Node) chargeWriter(id string, pid int) {
	a, ok := n.rt.(helperAttacher)
	if !ok {
		return
	}
	if err := a.AttachHelper(id, pid); err != nil && !errors.Is(err, syscall.ESRCH) {
		n.log.Warn("localnode: log writer left outside the replica's cgroup", "replica", id, "err", err)
	}
}
