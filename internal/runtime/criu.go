package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// OwnCRIU is where scripts/install-deps.sh builds CRIU (4.2 or later)
// when the host's own fails `criu check` or is older: Debian 12's 3.17
// cannot run on current kernels, and CRIU before 4.2 cannot dump a TCP
// socket on kernels from 6.16 on. It is preferred to criu on $PATH.
const OwnCRIU = "/usr/local/lib/shoal/criu/criu"

// CRIU is the CRIU this host offers for checkpoints and whether it works.
type CRIU struct {
	// Path is the binary ("" when there is none).
	Path string
	// Version is what `criu --version` says ("4.2.1").
	Version string
	// Err says why checkpoints cannot be taken here (nil: they can).
	Err error
}

// Usable reports whether checkpoints can be taken with c.
func (c CRIU) Usable() bool { return c.Path != "" && c.Err == nil }

// String says which CRIU is used and whether it works, for `shoal info`.
func (c CRIU) String() string {
	switch {
	case c.Path == "":
		return fmt.Sprintf("none (%v)", c.Err)
	case c.Err != nil:
		return fmt.Sprintf("%s %s, not used: %v", c.Path, c.Version, c.Err)
	}
	return fmt.Sprintf("%s %s (criu check passed)", c.Path, c.Version)
}

var (
	criuOnce sync.Once
	criuVal  CRIU
)

// FindCRIU returns the CRIU checkpoints use, probed once per process:
// OwnCRIU when it is there, else criu on $PATH, usable when it is 4.2 or
// later and `criu check` passes.
func FindCRIU(ctx context.Context) CRIU {
	criuOnce.Do(func() { criuVal = probeCRIU(ctx) })
	return criuVal
}

func probeCRIU(ctx context.Context) CRIU {
	var c CRIU
	if _, err := os.Stat(OwnCRIU); err == nil {
		c.Path = OwnCRIU
	} else if p, err := exec.LookPath("criu"); err == nil {
		c.Path = p
	} else {
		c.Err = fmt.Errorf("criu is not installed (scripts/install-deps.sh builds it into %s)", OwnCRIU)
		return c
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Path, "--version").CombinedOutput()
	if err != nil {
		c.Err = fmt.Errorf("criu --version: %w", err)
		return c
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "Version:"); ok {
			c.Version = strings.TrimSpace(v)
		}
	}
	if !versionAtLeast(c.Version, 4, 2) {
		c.Err = fmt.Errorf("version %q is older than 4.2, which cannot dump TCP sockets on current kernels (scripts/install-deps.sh builds 4.2.1 into %s)", c.Version, OwnCRIU)
		return c
	}
	out, err = exec.CommandContext(ctx, c.Path, "check").CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(bytes.TrimSpace(out))), "\n")
		c.Err = fmt.Errorf("criu check fails on this host: %s", lines[len(lines)-1])
	}
	return c
}

// versionAtLeast reports whether v ("4.2.1") is major.minor or later.
func versionAtLeast(v string, major, minor int) bool {
	var a, b int
	if n, _ := fmt.Sscanf(v, "%d.%d", &a, &b); n < 1 {
		return false
	}
	return a > major || a == major && b >= minor
}
