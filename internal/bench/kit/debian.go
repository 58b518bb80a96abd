package kit

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
)

// DebianImage builds Debian example image name (apache-php, nginx,
// python) with the source tree's scripts/debian-images.sh (mmdebstrap from
// Debian's mirror: minutes the first time, nothing once cached under
// /var/cache/shoal/debian-images) and imports it into the daemon as
// debian-NAME:1, the tag examples/debian/NAME/shoal.toml names. It
// returns the tag.
func (e *ServingEnv) DebianImage(ctx context.Context, name string) (string, error) {
	root, err := bench.SourceTree()
	if err != nil {
		return "", fmt.Errorf("debian image %s: scripts/debian-images.sh: %w", name, err)
	}
	bctx, cancel := context.WithTimeout(ctx, 25*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(bctx, "sh", filepath.Join(root, "scripts", "debian-images.sh"), name)
	cmd.Stdout, cmd.Stderr = &out, &errb
	// mmdebstrap is the script's grandchild: an interrupted build is ended
	// as a process group, with SIGTERM so that their clean-up runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("debian image %s: scripts/debian-images.sh: %w: %s", name, err, lastLines(errb.String(), 5))
	}
	tar := strings.TrimSpace(out.String())
	e.Opts.Logf("debian image %s: %s in %v", name, tar, time.Since(t0).Round(time.Millisecond))
	tag := "debian-" + name + ":1"
	ictx, icancel := context.WithTimeout(ctx, 10*time.Minute)
	defer icancel()
	d, err := e.Daemon.CLI(ictx, "image", "import", tar, "--tag", tag)
	if err != nil {
		return "", fmt.Errorf("debian image %s: %w", name, err)
	}
	e.Opts.Logf("debian image %s: imported as %s in %v", name, tag, d.Round(time.Millisecond))
	return tag, nil
}

// lastLines returns the last n lines of s, for error messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
