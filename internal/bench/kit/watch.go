package kit

import (
	"context"
	"math"
	"sync"
	"time"
)

// AppSample is an app's status at a time: its ready replicas and their CPU
// quotas.
type AppSample struct {
	T     time.Time
	Ready int
	CPU   float64   // the highest quota of a ready replica; NaN with none ready
	CPUs  []float64 // the quota of each ready replica
}

// WatchApp samples the app's status every 100 ms until stop is closed; the
// function it returns waits for the last sample and returns them all.
func (e *ServingEnv) WatchApp(ctx context.Context, app string, stop <-chan struct{}) func() []AppSample {
	var (
		mu  sync.Mutex
		out []AppSample
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if a, err := e.Status(ctx, app); err == nil {
				s := AppSample{T: time.Now(), Ready: a.Ready, CPU: math.NaN()}
				for _, r := range a.Replicas {
					if r.State != "ready" {
						continue
					}
					s.CPUs = append(s.CPUs, r.CPU)
					if math.IsNaN(s.CPU) || r.CPU > s.CPU {
						s.CPU = r.CPU
					}
				}
				mu.Lock()
				out = append(out, s)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []AppSample {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}
