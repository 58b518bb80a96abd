package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// BenchmarkLifecycle compares `shoal`'s Run+Wait+Delete of `true` with a bare
// `runc run` of a hand-made bundle on the same busybox rootfs, and reports the
// median of each phase over b.N rounds (use -benchtime=30x).
func BenchmarkLifecycle(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root")
	}
	layer, err := benchLayer()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	phases := &phaseLog{m: map[string][]time.Duration{}}
	r, err := New(context.Background(), Options{Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), CgroupParent: testCgroupParent,
		Logger: slog.New(phases)})
	if err != nil {
		b.Fatal(err)
	}
	// The bare baseline: the same rootfs as a plain directory, runc's own
	// default namespaces, `runc run` in the foreground, then nothing to clean.
	bare := filepath.Join(dir, "bare")
	if err := os.MkdirAll(bare, 0o755); err != nil {
		b.Fatal(err)
	}
	spec, err := exec.Command("runc", "spec", "--bundle", bare).CombinedOutput()
	if err != nil {
		b.Fatalf("runc spec: %v %s", err, spec)
	}
	var cfg map[string]any
	raw, _ := os.ReadFile(filepath.Join(bare, "config.json"))
	_ = json.Unmarshal(raw, &cfg)
	proc := cfg["process"].(map[string]any)
	proc["terminal"], proc["args"] = false, []string{"/bin/true"}
	cfg["root"] = map[string]any{"path": layer, "readonly": true}
	raw, _ = json.Marshal(cfg)
	_ = os.WriteFile(filepath.Join(bare, "config.json"), raw, 0o644)

	var bareT, runT, waitT, delT, totalT []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		cmd := exec.Command("runc", "--root", filepath.Join(dir, "bare-root"), "run", "--bundle", bare, fmt.Sprintf("bare-%d", i))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("bare runc: %v %s", err, out)
		}
		bareT = append(bareT, time.Since(t0))

		id := fmt.Sprintf("bench-%d", i)
		t0 = time.Now()
		if _, err := r.Run(context.Background(), Spec{ID: id, Layers: []string{layer}, Args: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		st, err := r.Wait(context.Background(), id)
		if err != nil || st.Code != 0 {
			b.Fatalf("wait: %v %+v", err, st)
		}
		t2 := time.Now()
		if err := r.Delete(context.Background(), id); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		runT, waitT, delT, totalT = append(runT, t1.Sub(t0)), append(waitT, t2.Sub(t1)), append(delT, t3.Sub(t2)), append(totalT, t3.Sub(t0))
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(median(bareT)), "bare-ms")
	b.ReportMetric(ms(median(runT)), "run-ms")
	b.ReportMetric(ms(median(waitT)), "wait-ms")
	b.ReportMetric(ms(median(delT)), "delete-ms")
	b.ReportMetric(ms(median(totalT)), "total-ms")
	b.ReportMetric(float64(median(totalT))/float64(median(bareT)), "ratio")
	for _, k := range []string{"bundle", "runtime"} {
		if d := phases.m["created."+k]; len(d) > 0 {
			b.ReportMetric(ms(median(d)), "run."+k+"-ms")
		}
	}
	if d := phases.m["deleted.total"]; len(d) > 0 {
		b.ReportMetric(ms(median(d)), "delete.inner-ms")
	}
}

// phaseLog collects the phase durations the Runtime logs at debug level.
type phaseLog struct {
	mu sync.Mutex
	m  map[string][]time.Duration
}

func (p *phaseLog) Enabled(context.Context, slog.Level) bool { return true }
func (p *phaseLog) WithAttrs([]slog.Attr) slog.Handler       { return p }
func (p *phaseLog) WithGroup(string) slog.Handler            { return p }
func (p *phaseLog) Handle(_ context.Context, rec slog.Record) error {
	prefix := strings.TrimPrefix(rec.Message, "container ")
	rec.Attrs(func(a slog.Attr) bool {
		if d, err := time.ParseDuration(a.Value.String()); err == nil {
			p.mu.Lock()
			p.m[prefix+"."+a.Key] = append(p.m[prefix+"."+a.Key], d)
			p.mu.Unlock()
		}
		return true
	})
	return nil
}

func benchLayer() (string, error) {
	busyboxOnce.Do(func() {
		d := filepath.Join(testTmp, "busybox")
		busyboxDir, busyboxErr = d, makeBusybox(d)
	})
	return busyboxDir, busyboxErr
}
