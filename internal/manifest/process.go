package manifest

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// DefaultStopTimeout is how long a replica has between its stop signal and
// SIGKILL when stop_timeout is unset.
const DefaultStopTimeout = 10 * time.Second

// MaxStopTimeout bounds stop_timeout.
const MaxStopTimeout = 10 * time.Minute

// Argv is the replica's process: Kubernetes' rules over the image's
// ENTRYPOINT and CMD. Command replaces the ENTRYPOINT and drops the CMD;
// Args replaces the CMD.
func (c Config) Argv(entrypoint, cmd []string) []string {
	if len(c.Command) > 0 {
		entrypoint, cmd = c.Command, nil
	}
	if len(c.Args) > 0 {
		cmd = c.Args
	}
	return append(append([]string{}, entrypoint...), cmd...)
}

// interpreters are programs whose first argument is a script or "-c".
var interpreters = map[string]bool{"sh": true, "bash": true, "dash": true, "ash": true, "zsh": true,
	"python": true, "python3": true, "perl": true, "ruby": true, "node": true, "php": true, "env": true}

// EntrypointWarning says, when command starts with an interpreter and the
// image has an ENTRYPOINT, that command replaces the entrypoint (a user
// who meant Docker's CMD would run the interpreter without it); "" when
// there is nothing to say.
func (c Config) EntrypointWarning(entrypoint []string) string {
	if len(c.Command) == 0 || len(entrypoint) == 0 || !interpreters[path.Base(c.Command[0])] {
		return ""
	}
	return fmt.Sprintf("command %q replaces the image's entrypoint %q (Kubernetes' meaning); "+
		"to keep the entrypoint and pass it arguments, use args instead", c.Command, entrypoint)
}

// ParseSignal reads a signal as a name ("SIGQUIT", "QUIT", any case) or
// a number (1-64).
func ParseSignal(s string) (syscall.Signal, error) {
	t := strings.TrimSpace(s)
	if n, err := strconv.Atoi(t); err == nil {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("%d is not a signal number 1-64", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(t)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("%q is not a signal name (such as SIGTERM, SIGQUIT, SIGINT) or number", s)
}

// Signal is the signal that stops a replica: stop_signal, else the
// image's StopSignal when it parses, else SIGTERM. Validate has checked
// stop_signal.
func (c Config) Signal(imageStopSignal string) syscall.Signal {
	for _, s := range []string{c.StopSignal, imageStopSignal} {
		if s == "" {
			continue
		}
		if sig, err := ParseSignal(s); err == nil {
			return sig
		}
	}
	return syscall.SIGTERM
}

// StopGrace is how long a replica has between its stop signal and SIGKILL.
func (c Config) StopGrace() time.Duration {
	if c.StopTimeout.Duration > 0 {
		return c.StopTimeout.Duration
	}
	return DefaultStopTimeout
}

func (c Config) validateStop() error {
	if c.StopSignal != "" {
		sig, err := ParseSignal(c.StopSignal)
		if err != nil {
			return errdefs.Invalid("stop_signal", "%v", err)
		}
		if sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
			return errdefs.Invalid("stop_signal", "%q cannot be caught; a replica is sent SIGKILL after stop_timeout anyway", c.StopSignal)
		}
	}
	switch d := c.StopTimeout.Duration; {
	case d < 0:
		return errdefs.Invalid("stop_timeout", "%s must not be negative", d)
	case d > MaxStopTimeout:
		return errdefs.Invalid("stop_timeout", "%s is more than %s", d, MaxStopTimeout)
	}
	return nil
}
