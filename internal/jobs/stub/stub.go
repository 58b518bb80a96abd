// Package stub is the process of a warm job sandbox (cmd/shoal-init): it
// reads the step's command from stdin, then execs it; and, in a sandbox
// reused from job to job, the process that starts such a stub for each
// step (Serve). It uses only the standard library, so the binary starts in
// about a millisecond.
package stub

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// Path is where a warm sandbox sees the shoal-init binary (read-only): its
// process, started before the job is known, is shoal-init, which reads the
// step's command from stdin and execs it (see Main).
const Path = "/dev/shoal-init"

// Cmd is what a warm sandbox's stub reads first on stdin, after its
// length (4 bytes, big-endian); the step's stdin follows.
type Cmd struct {
	Args []string `json:"args"`
	Env  []string `json:"env"` // set over the sandbox's own
	Cwd  string   `json:"cwd"`
	// CPUSecs, if set, is the soft RLIMIT_CPU the command gets (the hard
	// limit one second more); a reusable sandbox's process has none.
	CPUSecs uint64 `json:"cpu_secs,omitempty"`
}

// maxCmd bounds the command a stub reads.
const maxCmd = 4 << 20

// Failed starts the line a stub writes to stderr before it exits 127
// when it cannot run the step's command.
const Failed = "shoal-init: cannot run "

// Encode is c as a stub reads it.
func Encode(c Cmd) []byte {
	b, _ := json.Marshal(c)
	out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	return append(out, b...)
}

// Main runs inside a warm sandbox as its process: it reads the step's
// command from stdin, without reading past it, changes to its directory
// (made if missing, as the OCI runtime does) and execs it with its
// environment. It returns only on failure, with the exit status (127, as
// a shell reports a command it cannot run).
func Main() int {
	var n [4]byte
	var c Cmd
	err := announce()
	if err == nil {
		c, err = readCmd(os.Stdin, n[:])
	}
	if err == nil {
		err = execStep(c)
	}
	name := ""
	if len(c.Args) > 0 {
		name = c.Args[0]
	}
	fmt.Fprintf(os.Stderr, "%s%q: %v\n", Failed, name, err)
	return 127
}

func readCmd(r io.Reader, n []byte) (Cmd, error) {
	var c Cmd
	if _, err := io.ReadFull(r, n); err != nil {
		return c, fmt.Errorf("reading the command: %w", err)
	}
	size := binary.BigEndian.Uint32(n)
	if size > maxCmd {
		return c, fmt.Errorf("a command of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return c, fmt.Errorf("reading the command: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Args) == 0 {
		return c, fmt.Errorf("malformed command: %v", err)
	}
	return c, nil
}

func execStep(c Cmd) error {
	if c.CPUSecs > 0 {
		lim := syscall.Rlimit{Cur: c.CPUSecs, Max: c.CPUSecs + 1}
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &lim); err != nil {
			return fmt.Errorf("RLIMIT_CPU: %w", err)
		}
	}
	if err := os.Chdir(c.Cwd); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(c.Cwd, 0o755); err != nil {
			return fmt.Errorf("workdir %s: %w", c.Cwd, err)
		}
		err = os.Chdir(c.Cwd)
		if err != nil {
			return fmt.Errorf("workdir %s: %w", c.Cwd, err)
		}
	} else if err != nil {
		return fmt.Errorf("workdir %s: %w", c.Cwd, err)
	}
	// The sandbox's environment (the image's, PATH and HOME) with the
	// job's and the step's on top.
	for _, e := range c.Env {
		if k, v, ok := strings.Cut(e, "="); ok {
			os.Setenv(k, v)
		}
	}
	path, err := exec.LookPath(c.Args[0])
	if err != nil {
		return err
	}
	return fmt.Errorf("exec: %w", syscall.Exec(path, c.Args, os.Environ()))
}
