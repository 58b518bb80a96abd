package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// announceTimeout bounds the wait for a step's stub to say it runs.
const announceTimeout = 10 * time.Second

// stepIO is a step's stdio in a reusable sandbox, and the socket its stub
// announces itself on (see stub.MsgRun): the daemon's ends and the ends passed
// to the sandbox's process.
type stepIO struct {
	stdin, outR, errR *os.File
	sync              *net.UnixConn // with SO_PASSCRED: a message carries its sender's host pid
	theirs            []*os.File    // stdin, stdout, stderr, sync
}

func newStepIO() (io *stepIO, err error) {
	io = &stepIO{}
	defer func() {
		if err != nil {
			io.closeOurs()
			io.closeTheirs()
		}
	}()
	for _, p := range []**os.File{&io.stdin, &io.outR, &io.errR} {
		r, w, err := os.Pipe()
		if err != nil {
			return io, err
		}
		if p == &io.stdin {
			*p = w
			io.theirs = append(io.theirs, r)
		} else {
			*p = r
			io.theirs = append(io.theirs, w)
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return io, fmt.Errorf("step sync socket: %w", err)
	}
	io.theirs = append(io.theirs, os.NewFile(uintptr(fds[1]), "step sync"))
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(fds[0])
		return io, fmt.Errorf("step sync socket: %w", err)
	}
	if io.sync, err = unixConn(fds[0], "step sync"); err != nil {
		return io, err
	}
	return io, nil
}

// rights is the control message passing the sandbox's ends.
func (io *stepIO) rights() []byte {
	fds := make([]int, len(io.theirs))
	for i, f := range io.theirs {
		fds[i] = int(f.Fd())
	}
	return unix.UnixRights(fds...)
}

func (io *stepIO) closeTheirs() {
	for _, f := range io.theirs {
		f.Close()
	}
	io.theirs = nil
}

func (io *stepIO) closeOurs() {
	for _, f := range []*os.File{io.stdin, io.outR, io.errR} {
		if f != nil {
			f.Close()
		}
	}
	if io.sync != nil {
		io.sync.Close()
	}
}

// announced waits for the stub's byte and returns the stub's host pid,
// which the kernel put in the message's credentials.
func (io *stepIO) announced(ctx context.Context) (int, error) {
	defer io.sync.Close()
	io.sync.SetReadDeadline(time.Now().Add(announceTimeout))
	stop := context.AfterFunc(ctx, func() { io.sync.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	_, oobn, _, _, err := io.sync.ReadMsgUnix(buf, oob)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("step stub did not start: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return 0, fmt.Errorf("step stub: %w", err)
	}
	for _, m := range msgs {
		if cred, err := unix.ParseUnixCredentials(&m); err == nil && cred.Pid > 0 {
			return int(cred.Pid), nil
		}
	}
	return 0, errors.New("step stub: no credentials with its message")
}
