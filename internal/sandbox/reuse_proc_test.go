package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/runtime/cgroups"
	"github.com/shoal-run/shoal/internal/sandbox/stub"
)

// TestBoxProcKillFails: a step in a reusable sandbox whose cgroup cannot
// be killed, killed at once for its output (from the goroutine reading it)
// and for its end (from the one waiting for it), leaves its sandbox not
// to be reused, without the two racing on the sandbox (run with -race).
func TestBoxProcKillFails(t *testing.T) {
	pr := &boxProc{cg: cgroups.Paths{V2: true, Unified: filepath.Join(t.TempDir(), "gone")}, replies: make(chan reply, 1)}
	pr.replies <- reply{} // the stub ended (exit 0)
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errW.Close()
	go func() { outW.Write(make([]byte, 64)); outW.Close() }()
	s := &Sandbox{}
	var res jobs.StepResult
	end, _, err := s.supervise(context.Background(), pr, jobs.Limits{Timeout: time.Hour, OutputBytes: 8}, outR, errR, &res)
	if err != nil || !end.output {
		t.Fatalf("end %+v, %v: want killed for its output", end, err)
	}
	if pr.failed() == nil {
		t.Fatal("a step whose cgroup could not be killed does not say so")
	}
}

// TestMakeWarmNamesSandbox: a warm sandbox that cannot be made says which
// (its id names its work directory, container and cgroups).
func TestMakeWarmNamesSandbox(t *testing.T) {
	s := &Sandbox{Dir: filepath.Join(t.TempDir(), "gone")}
	b, err := s.makeWarm(warmKey{work: 1 << 20}, image.Image{})
	if err == nil || b == nil || !strings.Contains(err.Error(), "sandbox "+b.id+": ") {
		t.Fatalf("makeWarm in a missing directory: %v", err)
	}
}

// TestPrepareFailsLeavesNothing: a step that cannot be made ready (the
// sandbox's process takes its descriptors but starts no stub) fails with
// the reason the sandbox's process gives, and leaves no
// step cgroup and none of the step's pipes open in the daemon, and its
// sandbox is not reused.
func TestPrepareFailsLeavesNothing(t *testing.T) {
	root := t.TempDir()
	cg := cgroups.Paths{V1: map[string]string{"pids": filepath.Join(root, "pids"), "memory": filepath.Join(root, "memory")}}
	for _, d := range cg.Dirs() {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := unixConn(fds[0], "daemon control")
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	peer, err := unixConn(fds[1], "sandbox control")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	// The sandbox's process: keeps the step's stdio, closes the stub's
	// sync socket (so no stub announces itself) and says it failed.
	stdio := make(chan []*os.File, 1)
	go func() {
		var files []*os.File
		defer func() { stdio <- files }()
		oob := make([]byte, unix.CmsgSpace(4*4))
		_, oobn, _, _, err := peer.ReadMsgUnix(make([]byte, 16), oob)
		if err != nil {
			return
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			got, _ := unix.ParseUnixRights(&m)
			for _, fd := range got {
				files = append(files, os.NewFile(uintptr(fd), "step"))
			}
		}
		if len(files) == 4 {
			files[3].Close()
			files = files[:3]
		}
		// Its answer comes after the sync socket's end (the daemon's
		// goroutine reading it may be that late).
		time.Sleep(20 * time.Millisecond)
		peer.Write(append([]byte{stub.MsgFail}, "a job changed its resource limits"...))
	}()
	z := &box{ctl: ours, cg: cg}
	if err := z.prepare(); err == nil || !strings.Contains(err.Error(), "a job changed its resource limits") {
		t.Fatalf("prepare: %v, want the sandbox's process's answer, why it started no stub", err)
	}
	files := <-stdio
	if len(files) != 3 {
		t.Fatalf("the sandbox's process got %d descriptors, want the step's 4", len(files)+1)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	// Non-blocking: a writer still open gives EAGAIN, not a hang.
	in := int(files[0].Fd())
	if err := unix.SetNonblock(in, true); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Read(in, make([]byte, 1)); n != 0 || err != nil {
		t.Fatalf("the step's stdin: read %d, %v; want its writer closed", n, err)
	}
	for _, f := range files[1:] {
		if _, err := f.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("the step's stdout or stderr: write %v; want its reader closed", err)
		}
	}
	if z.bad == nil || z.next != nil {
		t.Fatalf("a sandbox whose step could not be readied: bad %v, next %v", z.bad, z.next)
	}
	if step := cg.Child("step1"); step.Exists() {
		t.Fatalf("step cgroup %v left", step.Dirs())
	}
}
