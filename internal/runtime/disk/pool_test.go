package disk

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Take hands out an image made now when the pool has none and one made
// ahead after that; the pool keeps keep images of the sizes taken most
// recently, at most maxSizes of them, and a new Pool adopts the complete
// ones and removes the half-made.
func TestPool(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPool(filepath.Join(dir, "pool"), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		dst := filepath.Join(dir, "taken"+string(rune('a'+i)))
		if err := p.Take(ctx, MinSize, dst); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(dst); err != nil || fi.Size() != MinSize {
			t.Fatalf("taken image: %v, %v", fi, err)
		}
	}
	for i := 1; i <= maxSizes; i++ {
		if err := p.Take(ctx, MinSize+int64(i)<<20, filepath.Join(dir, "size"+string(rune('0'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	imgs, _ := filepath.Glob(filepath.Join(dir, "pool", "*"))
	if len(imgs) != 2*maxSizes {
		t.Fatalf("images kept: %v, want 2 of each of %d sizes", imgs, maxSizes)
	}
	if _, ok := sizeOf(filepath.Base(imgs[0])); !ok {
		t.Fatalf("image name %s", imgs[0])
	}
	os.WriteFile(filepath.Join(dir, "pool", "8388608.00.img.tmp"), nil, 0o600)
	p2, err := NewPool(filepath.Join(dir, "pool"), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if n := len(p2.ready[MinSize+1<<20]); n != 2 {
		t.Fatalf("adopted %d images of a size, want 2", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "pool", "8388608.00.img.tmp")); err == nil {
		t.Fatal("a half-made image is left")
	}
}

// A size below MinSize is refused.
func TestPoolTooSmall(t *testing.T) {
	p, err := NewPool(t.TempDir(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Take(context.Background(), 1<<20, filepath.Join(t.TempDir(), "x")); err == nil {
		t.Fatal("a disk of 1 MiB")
	}
}
