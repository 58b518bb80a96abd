package network

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkAcquireRelease compares the time Acquire takes to make a
// namespace on the spot ("sync", no pool) with taking a ready one from the
// pool ("pool"), for each mode. Only Acquire is in ns/op; the Release that
// follows is reported as release-ns/op.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	for _, mode := range modes {
		for _, kind := range []string{"sync", "pool"} {
			b.Run(fmt.Sprintf("%s/%s", mode, kind), func(b *testing.B) {
				size := -1
				if kind == "pool" {
					size = 1
				}
				m := newManager(b, testOptions(b, size))
				var release time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if kind == "pool" {
						b.StopTimer()
						waitPool(b, m, mode)
						b.StartTimer()
					}
					a, err := m.Acquire(ctx, fmt.Sprintf("bench%d", i), mode)
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					if err := m.Release(ctx, a); err != nil {
						b.Fatal(err)
					}
					release += time.Since(start)
					b.StartTimer()
				}
				b.StopTimer()
				b.ReportMetric(float64(release.Nanoseconds())/float64(b.N), "release-ns/op")
				if s := m.Stats(); kind == "pool" && s.Misses > 0 {
					b.Fatalf("pool missed %d times: %+v", s.Misses, s)
				}
			})
		}
	}
}

// waitPool waits until the pool holds a namespace of mode.
func waitPool(b *testing.B, m *Manager, mode Mode) {
	deadline := time.Now().Add(60 * time.Second)
	for m.Stats().Ready[mode] == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("pool of %s not refilled: %+v", mode, m.Stats())
		}
		time.Sleep(100 * time.Microsecond)
	}
}
