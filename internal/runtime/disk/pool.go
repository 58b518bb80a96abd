package disk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/mountinfo"
)

// MinSize is the smallest image a Pool makes.
const MinSize = 8 << 20

// Pool keeps disks made ahead, up to keep of each of the few sizes taken
// most recently: each an image <dir>/<size>.<random>.img already attached
// and mounted at <dir>/m/<size>.<random>, so that a container's start only
// renames the image and moves the mount into its bundle (attaching a loop
// device and mounting ext4 took 2 to 40 ms each on a loaded host: the
// kernel waits for RCU grace periods). <dir>/m is a private bind mount of
// itself, so that its mounts can be moved out; the images stay beside it,
// on the bundles' mount, so that they can be renamed into them. Close unmounts and removes them; a Pool opened on a dir an
// earlier one left (a daemon killed) does the same first. A Pool is safe
// for concurrent use.
type Pool struct {
	dir  string
	keep int
	log  *slog.Logger

	mu     sync.Mutex
	ready  map[int64][]string // size → mounted disks (their base names), oldest first
	making map[int64]int      // size → disks being made ahead
	sizes  []int64            // sizes taken, most recent last
	closed bool
	wg     sync.WaitGroup
}

// maxSizes bounds how many sizes the pool keeps disks of.
const maxSizes = 4

// NewPool opens the pool in dir (made if missing), removing whatever an
// earlier Pool left there. keep is how many disks of a size are made ahead
// (0: none).
func NewPool(dir string, keep int, log *slog.Logger) (*Pool, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("disk pool: %w", err)
	}
	if err := clean(dir); err != nil {
		return nil, fmt.Errorf("disk pool: %w", err)
	}
	m := filepath.Join(dir, "m")
	if err := os.Mkdir(m, 0o700); err != nil {
		return nil, fmt.Errorf("disk pool: %w", err)
	}
	if err := unix.Mount(m, m, "", unix.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("disk pool: bind %s: %w", m, err)
	}
	if err := unix.Mount("", m, "", unix.MS_PRIVATE, ""); err != nil {
		unix.Unmount(m, unix.MNT_DETACH)
		return nil, fmt.Errorf("disk pool: make %s private: %w", m, err)
	}
	return &Pool{dir: dir, keep: keep, log: log, ready: map[int64][]string{}, making: map[int64]int{}}, nil
}

// clean unmounts everything at or below dir, deepest first, and empties it.
func clean(dir string) error {
	mps, err := mountinfo.MountsUnder(dir)
	if err != nil {
		return err
	}
	for i := len(mps) - 1; i >= 0; i-- {
		if err := unix.Unmount(mps[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", mps[i], err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Take puts a fresh disk of size bytes in place: its image at img and its
// file system mounted at mnt (a directory it makes), both on the pool's
// file system. A disk made ahead is moved there if the pool has one, else
// one is made now. Either way the pool makes another of that size in the
// background.
func (p *Pool) Take(ctx context.Context, size int64, img, mnt string) error {
	if size < MinSize {
		return fmt.Errorf("disk of %d bytes: below the minimum of %d", size, MinSize)
	}
	p.mu.Lock()
	var d string // a disk made ahead (its base name)
	if ds := p.ready[size]; len(ds) > 0 {
		d, p.ready[size] = ds[0], ds[1:]
	}
	p.use(size)
	p.mu.Unlock()
	// The next disk is made once this one is in place, not while it is
	// moved (both take the kernel's mount lock).
	defer func() {
		p.mu.Lock()
		p.fill(size)
		p.mu.Unlock()
	}()
	if err := os.Mkdir(mnt, 0o755); err != nil {
		if d != "" {
			p.drop(d)
		}
		return fmt.Errorf("disk: %w", err)
	}
	if d != "" {
		err := os.Rename(p.img(d), img)
		if err == nil {
			err = unix.Mount(p.mnt(d), mnt, "", unix.MS_MOVE, "")
		}
		if err == nil {
			os.Remove(p.mnt(d))
			return nil
		}
		p.log.Warn("disk pool: move a disk made ahead", "disk", d, "err", err)
		p.drop(d)
		os.Remove(img)
	}
	if err := Make(ctx, size, img); err != nil {
		return err
	}
	return Mount(img, mnt)
}

// img and mnt are where disk d of the pool has its image and its mount.
func (p *Pool) img(d string) string { return filepath.Join(p.dir, d+".img") }
func (p *Pool) mnt(d string) string { return filepath.Join(p.dir, "m", d) }

// drop unmounts and removes disk d of the pool.
func (p *Pool) drop(d string) {
	unix.Unmount(p.mnt(d), unix.MNT_DETACH)
	os.Remove(p.mnt(d))
	os.Remove(p.img(d))
}

// use moves size to the most recent of the sizes kept, dropping the disks
// of the least recent beyond maxSizes. p.mu is held.
func (p *Pool) use(size int64) {
	p.sizes = slices.DeleteFunc(p.sizes, func(s int64) bool { return s == size })
	p.sizes = append(p.sizes, size)
	for len(p.sizes) > maxSizes {
		old := p.sizes[0]
		p.sizes = p.sizes[1:]
		for _, d := range p.ready[old] {
			p.drop(d)
		}
		delete(p.ready, old)
	}
}

// fill starts making disks of size until keep are ready or being made.
// p.mu is held.
func (p *Pool) fill(size int64) {
	for !p.closed && len(p.ready[size])+p.making[size] < p.keep {
		p.making[size]++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			d := strconv.FormatInt(size, 10) + "." + randomName()
			err := Make(context.Background(), size, p.img(d))
			if err == nil {
				err = os.Mkdir(p.mnt(d), 0o755)
			}
			if err == nil {
				err = Mount(p.img(d), p.mnt(d))
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			p.making[size]--
			if err != nil {
				p.log.Warn("disk pool: make a disk ahead", "size", size, "err", err)
				p.drop(d)
				return
			}
			if p.closed || !slices.Contains(p.sizes, size) {
				p.drop(d)
				return
			}
			p.ready[size] = append(p.ready[size], d)
		}()
	}
}

// Wait waits for the disks being made ahead.
func (p *Pool) Wait() { p.wg.Wait() }

// Close waits for the disks being made, then unmounts and removes every
// disk of the pool and the pool's own mount.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = map[int64][]string{}
	if err := clean(p.dir); err != nil {
		p.log.Warn("disk pool: close", "err", err)
	}
}

// Make makes an empty ext4 file system of size bytes in a sparse file at
// dst (written as dst.tmp, then renamed). It has no journal (a container's
// writable layer does not outlive a crash of its host), reserves no blocks
// for root, and leaves its inode tables to be zeroed lazily, which the
// mount's noinit_itable skips: a new image takes well under 1 MB of the
// host's disk.
func Make(ctx context.Context, size int64, dst string) error {
	tmp := dst + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("disk %s: %w", dst, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
			"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", tmp)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if out, cerr := cmd.CombinedOutput(); cerr != nil {
			err = fmt.Errorf("mkfs.ext4: %w: %s", cerr, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		if errors.Is(err, exec.ErrNotFound) {
			err = fmt.Errorf("%w (install e2fsprogs)", err)
		}
		return fmt.Errorf("disk %s: %w", dst, err)
	}
	return nil
}

func randomName() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
