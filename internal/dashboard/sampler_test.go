package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// Each sample counts an app's replicas by state, adds up the CPU quota of
// those that run, and turns the proxy's request counter into a rate.
func TestSampleCountsReplicasAndRate(t *testing.T) {
	f := newFakeDaemon()
	fc := clock.NewFake(t0)
	d := newTestDashboard(f, fc)
	f.set([]types.App{{Name: "hello", Replicas: []types.Replica{
		replica("a", "ready", 0.5), replica("b", "frozen", 0.5), replica("c", "starting", 0.25), replica("d", "draining", 1),
	}}}, map[string]route.Load{"hello": {InFlight: 3, Queued: 1, Requests: 100}})
	d.s.sample(context.Background())
	fc.Advance(2 * time.Second)
	f.set(f.apps, map[string]route.Load{"hello": {InFlight: 2, Requests: 160}})
	d.s.sample(context.Background())

	snap, _ := d.s.snapshot()
	if len(snap.Apps) != 1 || len(snap.Apps[0].Points) != 2 {
		t.Fatalf("snapshot: %+v", snap)
	}
	first, last := snap.Apps[0].Points[0], snap.Apps[0].Points[1]
	if first.RPS != 0 || first.InFlight != 3 || first.Queued != 1 {
		t.Fatalf("first point: %+v", first)
	}
	want := Point{Time: t0.Add(2 * time.Second), RPS: 30, InFlight: 2, Ready: 1, Frozen: 1, Other: 2, CPU: 1.75}
	if last != want {
		t.Fatalf("second point: %+v, want %+v", last, want)
	}
	if snap.Seq != 2 || !snap.Time.Equal(want.Time) {
		t.Fatalf("seq %d time %v", snap.Seq, snap.Time)
	}
}

// A counter that goes back (a new proxy process) shows no rate, not a
// negative one.
func TestSampleCounterReset(t *testing.T) {
	f := newFakeDaemon()
	fc := clock.NewFake(t0)
	d := newTestDashboard(f, fc)
	f.set([]types.App{{Name: "hello"}}, map[string]route.Load{"hello": {Requests: 500}})
	d.s.sample(context.Background())
	fc.Advance(time.Second)
	f.set(f.apps, map[string]route.Load{"hello": {Requests: 7}})
	d.s.sample(context.Background())
	fc.Advance(time.Second)
	f.set(f.apps, map[string]route.Load{"hello": {Requests: 17}})
	d.s.sample(context.Background())
	snap, _ := d.s.snapshot()
	var rates []float64
	for _, p := range snap.Apps[0].Points {
		rates = append(rates, p.RPS)
	}
	if len(rates) != 3 || rates[1] != 0 || rates[2] != 10 {
		t.Fatalf("rates %v, want [0 0 10]", rates)
	}
}

// The history keeps the last History points, oldest first, and forgets an
// app that is gone.
func TestHistoryIsBounded(t *testing.T) {
	f := newFakeDaemon()
	fc := clock.NewFake(t0)
	d := newTestDashboard(f, fc) // History 5
	f.set([]types.App{{Name: "hello"}, {Name: "other"}}, nil)
	for i := 0; i < 8; i++ {
		f.stats = JobStats{Queued: i}
		d.s.sample(context.Background())
		fc.Advance(time.Second)
	}
	snap, _ := d.s.snapshot()
	pts := snap.Apps[0].Points
	if len(pts) != 5 || !pts[0].Time.Equal(t0.Add(3*time.Second)) || !pts[4].Time.Equal(t0.Add(7*time.Second)) {
		t.Fatalf("points: %+v", pts)
	}
	if len(snap.JobHist) != 5 || snap.JobHist[0].Queued != 3 || snap.JobHist[4].Queued != 7 {
		t.Fatalf("job history: %+v", snap.JobHist)
	}
	f.set([]types.App{{Name: "other"}}, nil)
	d.s.sample(context.Background())
	if _, ok := d.s.series["hello"]; ok || len(d.s.series) != 1 {
		t.Fatalf("series after hello went: %v", d.s.series)
	}
}

// Run samples once at once and then every Interval of the clock; the
// channel from snapshot is closed by the next sample.
func TestRunSamplesEachInterval(t *testing.T) {
	f := newFakeDaemon()
	fc := clock.NewFake(t0)
	d := newTestDashboard(f, fc)
	_, next := d.s.snapshot()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	<-next
	snap, next := d.s.snapshot()
	if snap.Seq != 1 {
		t.Fatalf("seq %d after the first sample", snap.Seq)
	}
	for fc.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	fc.Advance(time.Second)
	<-next
	if snap, _ := d.s.snapshot(); snap.Seq != 2 || !snap.Time.Equal(t0.Add(time.Second)) {
		t.Fatalf("after a second: seq %d at %v", snap.Seq, snap.Time)
	}
	cancel()
	<-d.done
}
