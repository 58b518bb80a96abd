package localnode

import (
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
// daemon. The caller closes the pipe once the replica has it.
func logWriter(init string, logf *os.File) (*os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	cmd := exec.Command(init, "log")
	cmd.Stdin, cmd.Stdout = pr, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("log writer: %w", err)
	}
	go cmd.Wait() //nolint:errcheck // it ends with the replica
	return pw, nil
}
