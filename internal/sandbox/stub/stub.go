// Package stub is the daemon's side of shoal-init (cmd/shoal-init), the
// process of a warm job sandbox: the path it is mounted at, its arguments,
// the messages of a reusable sandbox's control socket and the encoding of
// a step's command. shoal-init itself is a small static C program, so that
// a step in a reusable sandbox starts with a fork and an exec and no
// language runtime: its start-up is on every job's path.
package stub

import "encoding/binary"

// Path is where a warm sandbox sees the shoal-init binary (read-only): its
// process, started before the job is known, is shoal-init, which reads the
// step's command from stdin and execs it.
const Path = "/dev/shoal-init"

// ServeArg makes shoal-init the process of a reusable sandbox (Serve): the
// sandbox's pid 1, it takes requests on its stdin, a unix seqpacket socket
// (see MsgRun), one step at a time. It leaves every signal at its default
// action, so the kernel drops any signal sent to it from inside the
// sandbox, and is not dumpable. It exits, and with it every process of
// the sandbox, when the daemon's end of the socket closes. It reaps the
// orphans a step leaves (killed by the daemon with the step's cgroup);
// while the step runs, its process is its orphans' reaper (a child
// subreaper), as a container's process, its pid 1, is on the ordinary
// path.
const ServeArg = "serve"

// Messages on a reusable sandbox's control socket, each one datagram whose
// first byte says what it is.
const (
	// MsgRun (daemon to sandbox) starts a step: it carries four
	// descriptors, the step's stdin, stdout, stderr and a sync socket.
	// Serve forks a child with them as its fds 0 to 3 in a session of its
	// own, the reaper of its orphans; before it reads its command (Encode) on stdin, the child writes
	// a byte to fd 3 and closes it, so that the daemon, reading it with
	// SO_PASSCRED, learns its host pid and moves it into the step's cgroup
	// before the command runs. Serve then waits for the child.
	MsgRun = 'r'
	// MsgExit (sandbox to daemon) says the step's process ended; a 4-byte
	// big-endian wait status follows.
	MsgExit = 'x'
	// MsgFail (sandbox to daemon) says the step could not be started; the
	// reason follows as text.
	MsgFail = 'f'
)

// Cmd is what a warm sandbox's stub reads first on stdin (see Encode); the
// step's stdin follows.
type Cmd struct {
	Args []string
	Env  []string // set over the sandbox's own; entries without "=" are skipped
	Cwd  string   // made, with its parents, if missing
	// CPUSecs, if set, is the soft RLIMIT_CPU the command gets (the hard
	// limit one second more); a reusable sandbox's process has none.
	CPUSecs uint64
}

// MaxCmd bounds an encoded command (past its length), as shoal-init's
// MAX_CMD does.
const MaxCmd = 4 << 20

// Failed starts the line a stub writes to stderr before it exits 127
// when it cannot run the step's command: `shoal-init: cannot run "NAME":
// WHY`.
const Failed = "shoal-init: cannot run "

// Encode is c as a stub reads it: its length past these 4 bytes
// (big-endian), then CPUSecs (8 bytes), the counts of Args and Env (4
// bytes each), then Cwd, each of Args and each of Env, each ended by a NUL
// byte. The strings must hold no NUL byte (the job's plan refuses them);
// one that does makes the stub refuse the command.
func Encode(c Cmd) []byte {
	n := 16 + len(c.Cwd) + 1
	for _, s := range append(c.Args, c.Env...) {
		n += len(s) + 1
	}
	b := make([]byte, 0, 4+n)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint64(b, c.CPUSecs)
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Args)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Env)))
	for _, s := range append(append([]string{c.Cwd}, c.Args...), c.Env...) {
		b = append(append(b, s...), 0)
	}
	return b
}
