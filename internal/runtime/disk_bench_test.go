package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkRootfsStep times the writable layer and root of a container's
// start (what Create does before writing config.json), without a disk and
// with one of 1 GiB from the pool (made ahead, mounted, between rounds), and
// reports the median of each (use -benchtime=50x).
func BenchmarkRootfsStep(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root")
	}
	layer, err := benchLayer()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	r, err := New(context.Background(), Options{Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), CgroupParent: testCgroupParent})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var plain, withDisk []time.Duration
	for i := 0; i < b.N; i++ {
		for _, size := range []int64{0, 1 << 30} {
			bundle := filepath.Join(r.root, "b"+strconv.Itoa(i)+"-"+strconv.FormatInt(size, 10))
			if err := os.Mkdir(bundle, 0o711); err != nil {
				b.Fatal(err)
			}
			if size > 0 {
				pool, err := r.diskPool()
				if err != nil {
					b.Fatal(err)
				}
				pool.Wait() // the images made ahead are ready: the step's own time
			}
			t0 := time.Now()
			rw, err := r.mountDisk(context.Background(), bundle, size)
			if err == nil {
				err = mountRootfs(bundle, rw, []string{layer})
			}
			d := time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			if size > 0 {
				withDisk = append(withDisk, d)
			} else {
				plain = append(plain, d)
			}
			if _, err := unmountAll(bundle); err != nil {
				b.Fatal(err)
			}
			os.RemoveAll(bundle)
		}
	}
	b.ReportMetric(float64(median(plain).Microseconds())/1000, "ms-plain")
	b.ReportMetric(float64(median(withDisk).Microseconds())/1000, "ms-disk")
}
