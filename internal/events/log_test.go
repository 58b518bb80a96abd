package events

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
	"github.com/shoal-run/shoal/internal/store/storetest"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// backend opens a store; calling open again opens the same data anew (a
// restarted daemon, or a second node on etcd).
type backend struct {
	name string
	// setup returns an opener of one store's data.
	setup func(t *testing.T) (open func() store.Store)
}

var backends = []backend{
	{"bolt", func(t *testing.T) func() store.Store {
		path := filepath.Join(t.TempDir(), "store.db")
		return func() store.Store {
			b, err := store.OpenBolt(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}
	}},
	{"etcd", func(t *testing.T) func() store.Store {
		ep := storetest.StartEtcd(t)
		return func() store.Store {
			e, err := store.OpenEtcd(context.Background(), []string{ep})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		}
	}},
}

func each(t *testing.T, f func(t *testing.T, open func() store.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.setup(t)) })
	}
}

func emit(t *testing.T, l *Log, app, reason string) Event {
	t.Helper()
	e, err := l.Emit(context.Background(), Event{Kind: "scale", App: app, Reason: reason, Inputs: map[string]float64{"in_flight": 3}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func seqs(evs []Event) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func TestEmitListReopen(t *testing.T) {
	each(t, func(t *testing.T, open func() store.Store) {
		ctx := context.Background()
		fake := clock.NewFake(epoch)
		s := open()
		l := New(s, fake, 100)
		for i := 1; i <= 4; i++ {
			app := "a"
			if i%2 == 0 {
				app = "b"
			}
			e := emit(t, l, app, fmt.Sprint("r", i))
			if e.Seq != int64(i) || !e.Time.Equal(epoch.Add(time.Duration(i-1)*time.Second)) {
				t.Fatalf("event %d: seq %d time %v", i, e.Seq, e.Time)
			}
			fake.Advance(time.Second)
		}
		all, err := l.List(ctx, 0, "")
		if err != nil || fmt.Sprint(seqs(all)) != "[1 2 3 4]" {
			t.Fatalf("list: %v, %v", seqs(all), err)
		}
		if all[2].Reason != "r3" || all[2].App != "a" || all[2].Inputs["in_flight"] != 3 || !all[2].Time.Equal(epoch.Add(2*time.Second)) {
			t.Fatalf("event 3: %+v", all[2])
		}
		if b, _ := l.List(ctx, 0, "b"); fmt.Sprint(seqs(b)) != "[2 4]" {
			t.Fatalf("app b: %v", seqs(b))
		}
		if after, _ := l.List(ctx, 2, ""); fmt.Sprint(seqs(after)) != "[3 4]" {
			t.Fatalf("after 2: %v", seqs(after))
		}
		if none, err := l.List(ctx, 0, "c"); err != nil || none == nil || len(none) != 0 {
			t.Fatalf("app c: %v, %v; want an empty list", none, err)
		}
		// An event with a time keeps it.
		at := epoch.Add(-time.Hour)
		e, err := l.Emit(ctx, Event{Kind: "state", Reason: "ready", Time: at})
		if err != nil || !e.Time.Equal(at) || e.Seq != 5 {
			t.Fatalf("emit with time: %+v, %v", e, err)
		}

		// A restarted daemon continues the sequence.
		s.Close()
		l = New(open(), fake, 100)
		if e := emit(t, l, "a", "after restart"); e.Seq != 6 {
			t.Fatalf("seq after reopen %d, want 6", e.Seq)
		}
	})
}

func TestEmitInvalid(t *testing.T) {
	l := New(backends[0].setup(t)(), clock.NewFake(epoch), 10)
	for _, c := range []struct {
		e     Event
		field string
	}{
		{Event{Reason: "x"}, "kind"},
		{Event{Kind: "scale"}, "reason"},
	} {
		if _, err := l.Emit(context.Background(), c.e); !errdefs.IsInvalid(err) || errdefs.Field(err) != c.field {
			t.Errorf("emit %+v: %v; want invalid %s", c.e, err, c.field)
		}
	}
}

// TestTwoWriters: two logs on one store (two nodes, or a log made anew
// while the old one still writes) never reuse a seq and lose nothing.
func TestTwoWriters(t *testing.T) {
	each(t, func(t *testing.T, open func() store.Store) {
		s := open()
		s2 := s // one bolt file has one opener
		if strings.HasSuffix(t.Name(), "/etcd") {
			s2 = open() // a second client, as on a second node
		}
		logs := []*Log{New(s, clock.NewFake(epoch), 1000), New(s2, clock.NewFake(epoch), 1000)}
		const per = 15
		var wg sync.WaitGroup
		for i, l := range logs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < per; j++ {
					if _, err := l.Emit(context.Background(), Event{Kind: "k", App: fmt.Sprint("w", i), Reason: fmt.Sprint(j)}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		all, err := logs[0].List(context.Background(), 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2*per {
			t.Fatalf("%d events, want %d: %v", len(all), 2*per, seqs(all))
		}
		for i, e := range all {
			if e.Seq != int64(i+1) {
				t.Fatalf("seqs %v: want 1..%d with no gap", seqs(all), 2*per)
			}
		}
	})
}

func TestRetention(t *testing.T) {
	each(t, func(t *testing.T, open func() store.Store) {
		ctx := context.Background()
		l := New(open(), clock.NewFake(epoch), 20) // batch of 3
		for i := 1; i <= 23; i++ {
			emit(t, l, "a", fmt.Sprint(i))
		}
		l.trimming.Wait()
		if all, _ := l.List(ctx, 0, ""); len(all) != 23 {
			t.Fatalf("trimmed before a batch piled up: %v", seqs(all))
		}
		emit(t, l, "a", "24")
		l.trimming.Wait()
		all, err := l.List(ctx, 0, "")
		if err != nil || len(all) != 20 || all[0].Seq != 5 || all[19].Seq != 24 {
			t.Fatalf("after trim: %v, %v; want 5..24", seqs(all), err)
		}
		// A log opened anew counts what is kept and trims at the same point.
		l = New(l.s, clock.NewFake(epoch), 20)
		for i := 25; i <= 27; i++ {
			emit(t, l, "a", fmt.Sprint(i))
		}
		l.trimming.Wait()
		if all, _ := l.List(ctx, 0, ""); len(all) != 23 {
			t.Fatalf("reopened log trimmed early: %v", seqs(all))
		}
		if e := emit(t, l, "a", "28"); e.Seq != 28 {
			t.Fatalf("seq after trim %d", e.Seq)
		}
		l.trimming.Wait()
		if all, _ := l.List(ctx, 0, ""); len(all) != 20 || all[0].Seq != 9 {
			t.Fatalf("second trim: %v; want 9..28", seqs(all))
		}
	})
}

func collect(t *testing.T, ch <-chan Event, n int) []Event {
	t.Helper()
	var out []Event
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %v, want %d events", seqs(out), n)
			}
			out = append(out, e)
		case <-timeout:
			t.Fatalf("watch delivered %v, want %d events", seqs(out), n)
		}
	}
	return out
}

func TestWatch(t *testing.T) {
	each(t, func(t *testing.T, open func() store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		l := New(open(), clock.NewFake(epoch), 1000)
		emit(t, l, "a", "1")
		emit(t, l, "b", "2")
		emit(t, l, "a", "3")
		all, err := l.Watch(ctx, 1, "")
		if err != nil {
			t.Fatal(err)
		}
		onlyA, err := l.Watch(ctx, 0, "a")
		if err != nil {
			t.Fatal(err)
		}
		// Emits racing with the start of a watch are neither lost nor doubled.
		var wg sync.WaitGroup
		wg.Add(1)
		var late <-chan Event
		go func() {
			defer wg.Done()
			for i := 4; i <= 10; i++ {
				emit(t, l, []string{"a", "b"}[i%2], fmt.Sprint(i))
			}
		}()
		late, err = l.Watch(ctx, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if got := collect(t, all, 9); fmt.Sprint(seqs(got)) != "[2 3 4 5 6 7 8 9 10]" {
			t.Fatalf("watch after 1: %v", seqs(got))
		}
		if got := collect(t, onlyA, 6); fmt.Sprint(seqs(got)) != "[1 3 4 6 8 10]" {
			t.Fatalf("watch of a: %v", seqs(got))
		}
		if got := collect(t, late, 10); fmt.Sprint(seqs(got)) != "[1 2 3 4 5 6 7 8 9 10]" {
			t.Fatalf("watch from 0: %v", seqs(got))
		}
		cancel()
		for range all {
		}
		for range late {
		}
	})
}

// cuttingStore is a real store whose watches the test can end early, as a
// compacted etcd watch or a lagging bolt watcher ends.
type cuttingStore struct {
	store.Store
	mu   sync.Mutex
	cuts []context.CancelFunc
}

func (c *cuttingStore) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	wctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.cuts = append(c.cuts, cancel)
	c.mu.Unlock()
	return c.Store.Watch(wctx, prefix)
}

// cut ends the store watches open now, waiting (bounded) for one to exist.
func (c *cuttingStore) cut() int {
	for i := 0; i < 1000; i++ {
		c.mu.Lock()
		n := len(c.cuts)
		for _, f := range c.cuts {
			f()
		}
		c.cuts = nil
		c.mu.Unlock()
		if n > 0 {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0
}

func TestWatchRelistsWhenCut(t *testing.T) {
	each(t, func(t *testing.T, open func() store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cs := &cuttingStore{Store: open()}
		l := New(cs, clock.NewFake(epoch), 1000)
		emit(t, l, "a", "1")
		ch, err := l.Watch(ctx, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		collect(t, ch, 1)
		for round := 0; round < 3; round++ {
			if cs.cut() == 0 {
				t.Fatal("no store watch to cut")
			}
			// Written while the store's watch may be down: the re-list finds them.
			emit(t, l, "a", "x")
			emit(t, l, "a", "y")
		}
		got := collect(t, ch, 6)
		if fmt.Sprint(seqs(got)) != "[2 3 4 5 6 7]" {
			t.Fatalf("after cuts: %v", seqs(got))
		}
	})
}

// TestWatchSlowReader: a reader that does not keep up makes bolt drop the
// store watch; the log watches again and delivers every event once.
func TestWatchSlowReader(t *testing.T) {
	b, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"), store.WithWatchBuffer(2))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := New(b, clock.NewFake(epoch), 1000)
	ch, err := l.Watch(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100 // more than the watch's own buffer plus the store's
	for i := 0; i < n; i++ {
		emit(t, l, "a", fmt.Sprint(i))
	}
	got := collect(t, ch, n)
	for i, e := range got {
		if e.Seq != int64(i+1) {
			t.Fatalf("seqs %v: want 1..%d", seqs(got), n)
		}
	}
}
