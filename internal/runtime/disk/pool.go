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
)

// MinSize is the smallest image a Pool makes.
const MinSize = 8 << 20

// Pool keeps images made ahead in a directory of their own, up to Keep
// of each of the few sizes taken most recently. Images there are named
// <size>.<random>.img once complete (made as .tmp first), so a restarted
// daemon adopts the complete ones and removes the rest. A Pool is safe for
// concurrent use.
type Pool struct {
	dir  string
	keep int
	log  *slog.Logger

	mu     sync.Mutex
	ready  map[int64][]string // size → images ready, oldest first
	making map[int64]int      // size → images being made ahead
	sizes  []int64            // sizes taken, most recent last
	closed bool
	wg     sync.WaitGroup
}

// maxSizes bounds how many sizes the pool keeps images of.
const maxSizes = 4

// NewPool opens the pool in dir (made if missing), adopting the complete
// images an earlier Pool left there and removing anything else. keep is
// how many images of a size are made ahead (0: none).
func NewPool(dir string, keep int, log *slog.Logger) (*Pool, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("disk pool: %w", err)
	}
	p := &Pool{dir: dir, keep: keep, log: log, ready: map[int64][]string{}, making: map[int64]int{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("disk pool: %w", err)
	}
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		size, ok := sizeOf(e.Name())
		if ok && e.Type().IsRegular() && len(p.ready[size]) < keep {
			p.ready[size] = append(p.ready[size], path)
			if !slices.Contains(p.sizes, size) {
				p.sizes = append(p.sizes, size)
			}
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			return nil, fmt.Errorf("disk pool: %w", err)
		}
	}
	return p, nil
}

// sizeOf reads the size from a complete image's name.
func sizeOf(name string) (int64, bool) {
	s, rest, ok := strings.Cut(name, ".")
	if !ok || !strings.HasSuffix(rest, ".img") || strings.Count(rest, ".") != 1 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= MinSize
}

// Take puts a fresh image of size bytes at dst (on the pool's file
// system): one made ahead if the pool has one, else one made now. Either
// way the pool makes another of that size in the background.
func (p *Pool) Take(ctx context.Context, size int64, dst string) error {
	if size < MinSize {
		return fmt.Errorf("disk of %d bytes: below the minimum of %d", size, MinSize)
	}
	p.mu.Lock()
	var img string
	if imgs := p.ready[size]; len(imgs) > 0 {
		img, p.ready[size] = imgs[0], imgs[1:]
	}
	p.use(size)
	p.fill(size)
	p.mu.Unlock()
	if img != "" {
		if err := os.Rename(img, dst); err == nil {
			return nil
		}
		os.Remove(img)
	}
	return Make(ctx, size, dst)
}

// use moves size to the most recent of the sizes kept, dropping the
// images of the least recent beyond maxSizes. p.mu is held.
func (p *Pool) use(size int64) {
	p.sizes = slices.DeleteFunc(p.sizes, func(s int64) bool { return s == size })
	p.sizes = append(p.sizes, size)
	for len(p.sizes) > maxSizes {
		old := p.sizes[0]
		p.sizes = p.sizes[1:]
		for _, img := range p.ready[old] {
			os.Remove(img)
		}
		delete(p.ready, old)
	}
}

// fill starts making images of size until keep are ready or being made.
// p.mu is held.
func (p *Pool) fill(size int64) {
	for !p.closed && len(p.ready[size])+p.making[size] < p.keep {
		p.making[size]++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			img := filepath.Join(p.dir, strconv.FormatInt(size, 10)+"."+randomName()+".img")
			err := Make(context.Background(), size, img)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.making[size]--
			if err != nil {
				p.log.Warn("disk pool: make an image ahead", "size", size, "err", err)
				return
			}
			if !slices.Contains(p.sizes, size) {
				os.Remove(img)
				return
			}
			p.ready[size] = append(p.ready[size], img)
		}()
	}
}

// Close waits for the images being made; those made are kept for the next
// Pool in the directory.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
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
