package network

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkAcquireRelease compares the time Acquire takes to make a
// namespace on the spot ("sync", no pool) with taking a ready one from the
// pool ("pool"), for each mode, and, for None, taking one that the previous
// iteration gave back with Recycle ("recycle"). Only Acquire is in ns/op;
// the Release or Recycle that follows is reported as release-ns/op.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	for _, mode := range modes {
		for _, kind := range []string{"sync", "pool", "recycle"} {
			if kind == "recycle" && mode != None {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s", mode, kind), func(b *testing.B) {
				size := -1
				if kind != "sync" {
					size = 1
				}
				give := func(m *Manager) func(context.Context, *Attachment) error { return m.Release }
				m := newManager(b, testOptions(b, size))
				if kind == "recycle" {
					give = func(m *Manager) func(context.Context, *Attachment) error { return m.Recycle }
				}
				var release time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if kind != "sync" {
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
					if err := give(m)(ctx, a); err != nil {
						b.Fatal(err)
					}
					release += time.Since(start)
					b.StartTimer()
				}
				b.StopTimer()
				b.ReportMetric(float64(release.Nanoseconds())/float64(b.N), "release-ns/op")
				s := m.Stats()
				if kind != "sync" && s.Misses > 0 {
					b.Fatalf("pool missed %d times: %+v", s.Misses, s)
				}
				if kind == "recycle" && s.Reused != uint64(b.N) {
					b.Fatalf("reused %d of %d: %+v", s.Reused, b.N, s)
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

// BenchmarkCheckEmpty is the check Recycle makes of a None namespace.
func BenchmarkCheckEmpty(b *testing.B) {
	m := newManager(b, testOptions(b, -1))
	a, err := m.Acquire(context.Background(), "check", None)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Release(context.Background(), a) })
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := checkEmpty(a.NSPath); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSetPolicy is what a replica's start adds for its policy: the
// policy file and one netlink batch (its pairs with 8 replicas of an app
// it allows). The policy is dropped again between iterations, untimed.
func BenchmarkSetPolicy(b *testing.B) {
	ctx := context.Background()
	m := newManager(b, testOptions(b, -1))
	var held []*Attachment
	b.Cleanup(func() {
		for _, a := range held {
			m.Release(ctx, a)
		}
	})
	for i := 0; i < 9; i++ {
		a, err := m.Acquire(ctx, fmt.Sprint("p", i), Bridge)
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, a)
		if i > 0 {
			if err := m.SetPolicy(a, Policy{App: "db"}); err != nil {
				b.Fatal(err)
			}
		}
	}
	name, _, _ := m.parsePath(held[0].NSPath)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := m.SetPolicy(held[0], Policy{App: "web", Egress: EgressNone, Allow: []string{"db"}}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := m.pol.drop(name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
