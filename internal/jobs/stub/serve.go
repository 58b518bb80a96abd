package stub

import (
	"encoding/binary"
	"os"
	"syscall"
	"unsafe"
)

// Arguments of shoal-init.
const (
	// ServeArg makes shoal-init the process of a reusable sandbox (Serve).
	ServeArg = "serve"
	// StepArg makes it the stub of one step in a reusable sandbox: before
	// it reads its command it writes a byte to fd 3, so that the daemon,
	// which reads it with SO_PASSCRED, learns its host pid and moves it
	// into the step's cgroup before the command runs.
	StepArg = "step"
)

// Messages on a reusable sandbox's control socket (a unix seqpacket socket
// on Serve's stdin), each one datagram whose first byte says what it is.
const (
	// MsgRun (daemon to sandbox) starts a step's stub; it carries four
	// descriptors: the step's stdin, stdout, stderr and the stub's sync
	// socket (see StepArg).
	MsgRun = 'r'
	// MsgExit (sandbox to daemon) says the stub's process ended; a 4-byte
	// big-endian wait status follows.
	MsgExit = 'x'
	// MsgFail (sandbox to daemon) says the stub could not be started; the
	// reason follows as text.
	MsgFail = 'f'
)

// Serve is the process of a reusable sandbox: it runs, one at a time, the
// steps the daemon sends on stdin, each as a stub (StepArg) in a session of
// its own, and answers with how it ended. It returns when the daemon
// closes the socket.
//
// It is the sandbox's pid 1 and leaves every signal to its default action,
// so the kernel drops any signal sent to it from inside the sandbox as it
// is sent: a step can neither end it nor, by a flood of signals it would
// catch, make it spend CPU time outside the step's cgroup. It is not
// dumpable, so a step running as the same
// user can neither trace it nor open its memory or descriptors through
// /proc. The orphans a step leaves (killed by the daemon with the step's
// cgroup) are reaped before the next step starts.
func Serve() int {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); e != 0 {
		return 1
	}
	defaultSignals()
	go exitOnHangup()
	buf := make([]byte, 16)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		reap()
		n, oobn, _, _, err := syscall.Recvmsg(0, buf, oob, syscall.MSG_CMSG_CLOEXEC)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0
		}
		reap() // what the last step left, killed since with its cgroup
		fds := rights(oob[:oobn])
		if buf[0] != MsgRun || len(fds) != 4 {
			closeAll(fds)
			reply(append([]byte{MsgFail}, "malformed request"...))
			continue
		}
		files := make([]uintptr, len(fds))
		for i, fd := range fds {
			files[i] = uintptr(fd)
		}
		pid, err := syscall.ForkExec(Path, []string{"shoal-init", StepArg}, &syscall.ProcAttr{
			Env:   os.Environ(),
			Files: files,
			Sys:   &syscall.SysProcAttr{Setsid: true},
		})
		closeAll(fds)
		if err != nil {
			reply(append([]byte{MsgFail}, err.Error()...))
			continue
		}
		var ws syscall.WaitStatus
		for {
			if _, err = syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		if err != nil {
			reply(append([]byte{MsgFail}, err.Error()...))
			continue
		}
		reply(binary.BigEndian.AppendUint32([]byte{MsgExit}, uint32(ws)))
	}
}

// reap collects every child that has ended: the orphans of earlier steps.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 && err != syscall.EINTR {
			return
		}
	}
}

func reply(b []byte) { syscall.Sendmsg(0, b, nil, nil, 0) }

func rights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// announce, in a stub started with StepArg, writes the byte that tells the
// daemon its pid and closes the socket, so the command never holds it.
func announce() error {
	if len(os.Args) < 2 || os.Args[1] != StepArg {
		return nil
	}
	_, err := syscall.Write(3, []byte{'s'})
	syscall.Close(3)
	return err
}

// exitOnHangup ends Serve, and with it (the sandbox's pid 1) every process
// of the sandbox, as soon as the daemon's end of the control socket is
// closed: a daemon that died leaves no step running.
func exitOnHangup() {
	const pollRDHUP = 0x2000
	fds := []struct {
		fd             int32
		events, revent int16
	}{{fd: 0, events: pollRDHUP}}
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, 0, 0, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		os.Exit(2)
	}
}

// defaultSignals sets the action of every signal but SIGKILL and SIGSTOP
// to the default, over the handlers the Go runtime installed (its
// goroutine preemption, which uses SIGURG, then does not happen: Serve
// needs none).
func defaultSignals() {
	var act [4]uint64 // struct sigaction all zero: SIG_DFL, no flags, no mask
	for sig := 1; sig <= 64; sig++ {
		if sig != int(syscall.SIGKILL) && sig != int(syscall.SIGSTOP) {
			syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
		}
	}
}
