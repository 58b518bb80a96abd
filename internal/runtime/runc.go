package runtime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// command builds an OCI runtime command with shoal's --root.
func (r *Runtime) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--root", r.runtimeRoot}, args...)
	return exec.CommandContext(ctx, r.bin, full...)
}

// runQuiet runs a runtime command whose output is only wanted on failure.
func (r *Runtime) runQuiet(ctx context.Context, args ...string) ([]byte, error) {
	cmd := r.command(ctx, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", r.name, args[0], err, msg)
	}
	return out.Bytes(), nil
}

// logError returns the last error message of a runtime's JSON log.
func logError(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && (e.Level == "error" || e.Level == "fatal") && e.Msg != "" {
			last = e.Msg
		}
	}
	return last
}

// stdio opens what a container's or exec's stdio should be. close releases
// what it opened; the caller's files are left alone.
type stdio struct {
	in, out, err *os.File
	closers      []io.Closer
	// copyIn copies a reader to the pipe behind in; pw is that pipe's write
	// end, closed by copyIn, or by close if copyIn never ran.
	copyIn  func()
	pw      *os.File
	copying bool
}

// startCopy starts copying stdin into the container, if there is a copy.
func (s *stdio) startCopy() {
	if s.copyIn != nil && !s.copying {
		s.copying = true
		go s.copyIn()
	}
}

func openStdio(in io.Reader, out, errw *os.File) (*stdio, error) {
	s := &stdio{out: out, err: errw}
	var null *os.File
	devnull := func() (*os.File, error) {
		if null == nil {
			f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				return nil, err
			}
			null = f
			s.closers = append(s.closers, f)
		}
		return null, nil
	}
	var err error
	switch v := in.(type) {
	case nil:
		s.in, err = devnull()
	case *os.File:
		s.in = v
	default:
		pr, pw, perr := os.Pipe()
		if perr != nil {
			return nil, perr
		}
		s.in, s.pw = pr, pw
		s.closers = append(s.closers, pr)
		s.copyIn = func() {
			_, _ = io.Copy(pw, v)
			pw.Close()
		}
	}
	if err == nil && s.out == nil {
		s.out, err = devnull()
	}
	if err == nil && s.err == nil {
		s.err, err = devnull()
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *stdio) close() {
	for _, c := range s.closers {
		c.Close()
	}
	if s.pw != nil && !s.copying {
		s.pw.Close()
	}
}

// runtimeState is the part of `runc list --format json` shoal reads.
type runtimeState struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

// listRuntime lists the containers under RuntimeRoot.
func (r *Runtime) listRuntime(ctx context.Context) ([]runtimeState, error) {
	if _, err := os.Stat(r.runtimeRoot); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	// Only stdout is JSON: the runtime warns on stderr about a container
	// whose state it cannot read (one a killed daemon left half-created).
	cmd := r.command(ctx, "list", "--format", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s list: %w: %s", r.name, err, strings.TrimSpace(stderr.String()))
	}
	out := stdout.Bytes()
	var list []runtimeState
	if s := bytes.TrimSpace(out); len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		if err := json.Unmarshal(s, &list); err != nil {
			return nil, fmt.Errorf("%s list: %w", r.name, err)
		}
	}
	// A state directory the runtime cannot read is still ours to remove.
	entries, _ := os.ReadDir(r.runtimeRoot)
	seen := map[string]bool{}
	for _, s := range list {
		seen[s.ID] = true
	}
	for _, e := range entries {
		if e.IsDir() && !seen[e.Name()] {
			list = append(list, runtimeState{ID: e.Name(), Status: "unknown"})
		}
	}
	return list, nil
}

// readPid reads a pid file the runtime wrote.
func readPid(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: bad content %q", file, b)
	}
	return pid, nil
}

func (r *Runtime) stateDir(id string) string { return filepath.Join(r.runtimeRoot, id) }

// since is for phase timing in debug logs.
func since(t time.Time) string { return time.Since(t).Round(10 * time.Microsecond).String() }
