package runtime

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// runcSeals are the seals runc looks for on its own binary: a memfd sealed
// with all four cannot be written, so runc trusts it as a copy of itself
// (the defence against CVE-2019-5736) and skips making one of its own.
const runcSeals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE

// sealedBins holds one sealed copy per runc binary for the whole process:
// every Runtime on the same binary runs the same copy.
var sealedBins struct {
	mu    sync.Mutex
	paths map[string]string // host path → path that runs the sealed copy
	// files keeps the copies open (an unreferenced *os.File is closed
	// by its finalizer, and its descriptor number reused).
	files []*os.File
}

// sealedRunc returns a path that runs a sealed in-memory copy of the runc
// binary at bin. runc 1.1 otherwise copies its whole binary (about 10 MB)
// into a new memfd for every container it creates, before the container's
// init runs; with the copy made once here, `runc init` finds its binary
// already sealed and skips that. The copy cannot be written by anyone,
// the daemon included. It returns bin itself, and why, when the host does
// not allow running a memfd (vm.memfd_noexec) or the copy fails.
func sealedRunc(ctx context.Context, bin string) (string, error) {
	sealedBins.mu.Lock()
	defer sealedBins.mu.Unlock()
	if p, ok := sealedBins.paths[bin]; ok {
		return p, nil
	}
	p, f, err := sealCopy(ctx, bin)
	if err != nil {
		return bin, err
	}
	sealedBins.files = append(sealedBins.files, f)
	if sealedBins.paths == nil {
		sealedBins.paths = map[string]string{}
	}
	sealedBins.paths[bin] = p
	return p, nil
}

// sealCopy copies bin into a sealed memfd that stays open for the life of
// the process and checks that it runs (`--version`).
func sealCopy(ctx context.Context, bin string) (string, *os.File, error) {
	fd, err := unix.MemfdCreate("runc-sealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return "", nil, fmt.Errorf("sealed copy of %s: memfd: %w", bin, err)
	}
	mem := os.NewFile(uintptr(fd), "runc-sealed")
	ok := false
	defer func() {
		if !ok {
			mem.Close()
		}
	}()
	src, err := os.Open(bin)
	if err != nil {
		return "", nil, fmt.Errorf("sealed copy of %s: %w", bin, err)
	}
	_, err = io.Copy(mem, src)
	src.Close()
	if err != nil {
		return "", nil, fmt.Errorf("sealed copy of %s: %w", bin, err)
	}
	if _, err := unix.FcntlInt(mem.Fd(), unix.F_ADD_SEALS, runcSeals); err != nil {
		return "", nil, fmt.Errorf("sealed copy of %s: seal: %w", bin, err)
	}
	// The daemon's own descriptor, named through its pid: a child resolves
	// the path while it execs, whatever its own table holds.
	path := "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(fd)
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(vctx, path, "--version").CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("sealed copy of %s does not run: %w: %s", bin, err, out)
	}
	ok = true
	return path, mem, nil
}
