package stub_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/sandbox/stub"
	"github.com/shoal-run/shoal/internal/sandbox/stub/stubtest"
)

// built is shoal-init, compiled once for the package's tests.
var built string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stub-test")
	if err != nil {
		panic(err)
	}
	built = filepath.Join(dir, "shoal-init")
	if err := stubtest.Build(built); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runStub runs shoal-init as a sandbox used once: stdin is in.
func runStub(t *testing.T, in []byte) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(built)
	cmd.Stdin = bytes.NewReader(in)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if x, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), x.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

// TestStubRunsCommand: the stub reads its command without reading past
// it, so the rest of stdin is the command's; it runs it in its directory
// (made if missing) with the environment on top of its own, entries
// without "=" skipped, and its CPU time limit.
func TestStubRunsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	c := stub.Cmd{Args: []string{"sh", "-c", `read l; echo "$l|$A|$(pwd)|$(ulimit -t)"; cat`},
		Env: []string{"A=1", "NOEQUALS"}, Cwd: dir, CPUSecs: 7}
	out, errOut, code := runStub(t, append(stub.Encode(c), "line\nrest"...))
	if code != 0 || errOut != "" || out != "line|1|"+dir+"|7\nrest" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestStubRefuses: a command that cannot run, or is malformed, ends the
// stub with 127 and a line starting with stub.Failed naming it.
func TestStubRefuses(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("echo not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noX := filepath.Join(t.TempDir(), "nox")
	if err := os.WriteFile(noX, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := stub.Encode(stub.Cmd{Args: []string{"true"}, Cwd: "/"})
	// A directory of $PATH whose name with the command's is longer than a
	// path may be, but cut at that length names a program: it is not run.
	long := t.TempDir()
	for len(long) < 4092 {
		k := 4092 - len(long) - 1 // the last name, 1 to 200 bytes
		if k > 200 {
			k = min(200, k-2) // leaving at least 2 bytes: a "/" and a name
		}
		long = filepath.Join(long, strings.Repeat("d", k))
	}
	if len(long) != 4092 {
		t.Fatalf("a directory of %d bytes, want 4092", len(long))
	}
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/true", filepath.Join(long, "tr")); err != nil {
		t.Fatal(err)
	}
	withSize := func(b []byte, n uint32) []byte {
		b = append([]byte{}, b...)
		binary.BigEndian.PutUint32(b, n)
		return b
	}
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"path too long":   {stub.Encode(stub.Cmd{Args: []string{"true"}, Env: []string{"PATH=" + long}, Cwd: "/"}), `"true": executable file not found in $PATH`},
		"missing command": {stub.Encode(stub.Cmd{Args: []string{"no-such-command"}, Cwd: "/"}), `"no-such-command": executable file not found in $PATH`},
		"not executable":  {stub.Encode(stub.Cmd{Args: []string{noX}, Cwd: "/"}), `exec: Permission denied`},
		"not a program":   {stub.Encode(stub.Cmd{Args: []string{plain}, Cwd: "/"}), `exec: Exec format error`},
		"quoted name":     {stub.Encode(stub.Cmd{Args: []string{"a\"b\n"}, Cwd: "/"}), `"a\"b\x0a": executable`},
		"workdir":         {stub.Encode(stub.Cmd{Args: []string{"true"}, Cwd: plain + "/x"}), `"true": workdir ` + plain + `/x: Not a directory`},
		"empty":           {nil, `"": no command on stdin`},
		"short":           {ok[:len(ok)-2], `the command was cut short`},
		"too big":         {withSize(ok, stub.MaxCmd+1), `malformed command (its size)`},
		"too small":       {withSize(ok, 8), `malformed command (its size)`},
		"no args":         {stub.Encode(stub.Cmd{Cwd: "/"}), `malformed command (its counts)`},
		"NUL in arg":      {stub.Encode(stub.Cmd{Args: []string{"tr\x00ue"}, Cwd: "/"}), `malformed command (more strings than counted)`},
		"counts past end": {append(withSize(ok, uint32(len(ok)-4+1)), 'x'), `malformed command (its counts)`},
	} {
		t.Run(name, func(t *testing.T) {
			out, errOut, code := runStub(t, tc.in)
			if code != 127 || out != "" || !strings.HasPrefix(errOut, stub.Failed) || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 127 and %q", code, out, errOut, tc.want)
			}
		})
	}
}

// serve is a shoal-init serve process and the daemon's end of its socket.
type serve struct {
	cmd *exec.Cmd
	ctl *net.UnixConn
}

func startServe(t testing.TB) *serve {
	t.Helper()
	ours, theirs := socketpair(t)
	cmd := exec.Command(built, stub.ServeArg)
	cmd.Stdin = theirs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	s := &serve{cmd: cmd, ctl: ours}
	t.Cleanup(func() { s.ctl.Close(); s.cmd.Process.Kill(); s.cmd.Wait() })
	return s
}

func socketpair(t testing.TB) (*net.UnixConn, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "ours")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "theirs")
}

// step is one step's descriptors, the daemon's ends.
type step struct {
	stdin, stdout *os.File
	sync          *net.UnixConn
}

// start sends a MsgRun and waits for the step's announcement, which
// carries its pid.
func (s *serve) start(t testing.TB) (step, int) {
	t.Helper()
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	syncOurs, syncTheirs := socketpair(t)
	unix.SetsockoptInt(fdOf(t, syncOurs), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	rights := unix.UnixRights(int(inR.Fd()), int(outW.Fd()), int(outW.Fd()), int(syncTheirs.Fd()))
	if _, _, err := s.ctl.WriteMsgUnix([]byte{stub.MsgRun}, rights, nil); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	syncTheirs.Close()
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	syncOurs.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, oobn, _, _, err := syncOurs.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatalf("announcement: %v", err)
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	cred, err := unix.ParseUnixCredentials(&msgs[0])
	if err != nil || buf[0] != 's' {
		t.Fatalf("announcement %q: %v", buf, err)
	}
	return step{stdin: inW, stdout: outR, sync: syncOurs}, int(cred.Pid)
}

func fdOf(t testing.TB, c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	raw.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// reply reads Serve's answer.
func (s *serve) reply(t testing.TB) []byte {
	t.Helper()
	buf := make([]byte, 512)
	s.ctl.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _, _, _, err := s.ctl.ReadMsgUnix(buf, nil)
	if err != nil {
		t.Fatalf("reply: %v", err)
	}
	return buf[:n]
}

// TestServeSteps: Serve runs steps one after the other, each a child that
// announces itself (its pid, in a session of its own, not yet its
// command) before it reads its command; it answers each with the wait
// status, and a malformed request with MsgFail.
func TestServeSteps(t *testing.T) {
	s := startServe(t)
	for i, want := range []int{0, 3} {
		st, pid := s.start(t)
		if sid, err := unix.Getsid(pid); err != nil || sid != pid {
			t.Fatalf("step %d: session %d (%v), want its own", i, sid, err)
		}
		if comm, _ := os.ReadFile("/proc/" + itoa(pid) + "/cmdline"); !bytes.HasPrefix(comm, []byte(built)) {
			t.Fatalf("step %d ran %q before its command was sent", i, comm)
		}
		st.stdin.Write(stub.Encode(stub.Cmd{Args: []string{"sh", "-c", "echo $$; exit " + itoa(want)}, Cwd: "/"}))
		st.stdin.Close()
		r := s.reply(t)
		if len(r) != 5 || r[0] != stub.MsgExit || syscall.WaitStatus(binary.BigEndian.Uint32(r[1:])).ExitStatus() != want {
			t.Fatalf("step %d: reply %q, want exit %d", i, r, want)
		}
		var out bytes.Buffer
		out.ReadFrom(st.stdout)
		if strings.TrimSpace(out.String()) != itoa(pid) {
			t.Fatalf("step %d: the command ran as %q, want the announced pid %d", i, out.String(), pid)
		}
	}
	if _, _, err := s.ctl.WriteMsgUnix([]byte{stub.MsgRun}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if r := s.reply(t); len(r) == 0 || r[0] != stub.MsgFail {
		t.Fatalf("a request without descriptors: reply %q", r)
	}
}

// TestServeExitsOnHangup: Serve ends, while a step runs, as soon as the
// daemon's end of its socket closes.
func TestServeExitsOnHangup(t *testing.T) {
	s := startServe(t)
	st, pid := s.start(t)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) }) // not in a pid namespace here: outlives Serve
	st.stdin.Write(stub.Encode(stub.Cmd{Args: []string{"sleep", "60"}, Cwd: "/"}))
	s.ctl.Close()
	err := s.cmd.Wait()
	if x, ok := err.(*exec.ExitError); !ok || x.ExitCode() != 2 {
		t.Fatalf("Serve after hang-up: %v, want exit status 2", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// BenchmarkServeStep is a step's run through Serve once it is started (the
// daemon readies it before its job comes): the command sent, run, and its
// exit status answered. BenchmarkExec is the same command run from Go.
func BenchmarkServeStep(b *testing.B) {
	s := startServe(b)
	cmd := stub.Encode(stub.Cmd{Args: []string{"echo", "hello"}, Cwd: "/"})
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		st, _ := s.start(b)
		b.StartTimer()
		st.stdin.Write(cmd)
		st.stdin.Close()
		if r := s.reply(b); r[0] != stub.MsgExit {
			b.Fatalf("reply %q", r)
		}
		b.StopTimer()
		st.stdout.Close()
		st.sync.Close()
	}
}

func BenchmarkExec(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := exec.Command("echo", "hello").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestServeRefusesWhenChanged: once what Serve hands down to its steps
// changed (here its nice value, and on another Serve its OOM score
// adjustment), it starts no step and says what changed.
func TestServeRefusesWhenChanged(t *testing.T) {
	for name, change := range map[string]func(pid int) error{
		"scheduling": func(pid int) error { return syscall.Setpriority(syscall.PRIO_PROCESS, pid, 7) },
		"OOM score":  func(pid int) error { return os.WriteFile("/proc/"+itoa(pid)+"/oom_score_adj", []byte("500"), 0) },
	} {
		t.Run(name, func(t *testing.T) {
			s := startServe(t)
			st, _ := s.start(t) // Serve is up, its state read
			st.stdin.Write(stub.Encode(stub.Cmd{Args: []string{"true"}, Cwd: "/"}))
			st.stdin.Close()
			s.reply(t)
			if err := change(s.cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			inR, inW, _ := os.Pipe()
			defer inR.Close()
			defer inW.Close()
			if _, _, err := s.ctl.WriteMsgUnix([]byte{stub.MsgRun}, unix.UnixRights(int(inR.Fd()), int(inW.Fd()), int(inW.Fd()), int(inR.Fd())), nil); err != nil {
				t.Fatal(err)
			}
			if r := s.reply(t); len(r) == 0 || r[0] != stub.MsgFail || !strings.Contains(string(r), "a job changed") {
				t.Fatalf("after the change: reply %q, want MsgFail saying what changed", r)
			}
		})
	}
}
