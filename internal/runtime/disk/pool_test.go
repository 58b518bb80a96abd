package disk

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/shoal-run/shoal/internal/mountinfo"
)

// Take hands out a disk made now when the pool has none and one made
// ahead, moved into place, after that; the pool keeps keep disks of the
// sizes taken most recently, at most maxSizes of them; Close leaves no
// mount, and a new Pool removes what a killed one left.
func TestPool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (loop devices, mounts)")
	}
	dir := t.TempDir()
	pool := filepath.Join(dir, "pool")
	p, err := NewPool(pool, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var mnts []string
	t.Cleanup(func() {
		for _, m := range mnts {
			unmount(m)
		}
	})
	take := func(size int64, name string) {
		t.Helper()
		img, mnt := filepath.Join(dir, name+".img"), filepath.Join(dir, name)
		if err := p.Take(ctx, size, img, mnt); err != nil {
			t.Fatal(err)
		}
		mnts = append(mnts, mnt)
		if fi, err := os.Stat(img); err != nil || fi.Size() != size {
			t.Fatalf("taken image: %v, %v", fi, err)
		}
		if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644); err != nil {
			t.Fatalf("write on the taken disk: %v", err)
		}
	}
	for i := 0; i < 3; i++ {
		take(MinSize, "a"+strconv.Itoa(i))
		p.Wait()
	}
	for i := 1; i <= maxSizes; i++ {
		take(MinSize+int64(i)<<20, "s"+strconv.Itoa(i))
	}
	p.Wait()
	if mps, _ := mountinfo.MountsUnder(pool); len(mps) != 1+2*maxSizes {
		t.Fatalf("pool mounts: %v, want its own and 2 disks of each of %d sizes", mps, maxSizes)
	}
	// A daemon killed with its pool: the next one cleans it.
	p2, err := NewPool(pool, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mps, _ := mountinfo.MountsUnder(pool); len(mps) != 1 {
		t.Fatalf("pool mounts after a restart: %v, want its own only", mps)
	}
	p2.Close()
	if mps, _ := mountinfo.MountsUnder(pool); len(mps) != 0 {
		t.Fatalf("pool mounts after Close: %v", mps)
	}
	if ents, _ := os.ReadDir(pool); len(ents) != 0 {
		t.Fatalf("pool files after Close: %d", len(ents))
	}
}

func unmount(m string) { _ = clean(m) }

// A size below MinSize is refused.
func TestPoolTooSmall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (mounts)")
	}
	p, err := NewPool(t.TempDir(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Take(context.Background(), 1<<20, filepath.Join(t.TempDir(), "x.img"), filepath.Join(t.TempDir(), "x")); err == nil {
		t.Fatal("a disk of 1 MiB")
	}
}
