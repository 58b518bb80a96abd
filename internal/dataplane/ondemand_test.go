package dataplane

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// demandDaemon is a stand-in daemon on a unix socket that counts the
// demands it is sent; each waits until release is closed, if it is set.
type demandDaemon struct {
	socket          string
	posts, inFlight atomic.Int32
	maxInFlight     atomic.Int32
	mu              sync.Mutex
	names           map[string]int
	release         chan struct{}
	code            atomic.Int32 // the answer (default 202)
}

func newDemandDaemon(t *testing.T, release chan struct{}) *demandDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp-demand")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &demandDaemon{socket: filepath.Join(dir, "api.sock"), names: map[string]int{}, release: release}
	l, err := net.Listen("unix", d.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := d.inFlight.Add(1)
		defer d.inFlight.Add(-1)
		for {
			m := d.maxInFlight.Load()
			if n <= m || d.maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		d.posts.Add(1)
		d.mu.Lock()
		d.names[strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/certs/"), "/demand")]++
		d.mu.Unlock()
		if d.release != nil {
			<-d.release
		}
		if c := d.code.Load(); c != 0 {
			w.WriteHeader(int(c))
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return d
}

// A stranger's handshakes for many names put no more than maxDemands
// demands on the wire at once; the rest are dropped.
func TestCertMissingBounded(t *testing.T) {
	release := make(chan struct{})
	d := newDemandDaemon(t, release)
	a := newActivator(d.socket, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	a.demandHC.Timeout = time.Minute
	t.Cleanup(a.close)
	const n = 50
	var returned atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.CertMissing(ctx, fmt.Sprintf("n%d.example.test", i))
			returned.Add(1)
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for returned.Load() < n-maxDemands || d.inFlight.Load() < maxDemands {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d demands returned, %d on the wire; want %d dropped and %d on the wire",
				returned.Load(), n, d.inFlight.Load(), n-maxDemands, maxDemands)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	if p, m := d.posts.Load(), d.maxInFlight.Load(); p != maxDemands || m != maxDemands {
		t.Fatalf("%d demands sent, at most %d at once; want %d", p, m, maxDemands)
	}
}

// Past maxAsked names, the names asked for are not forgotten all at
// once: one asked within demandEvery is not asked for again.
func TestCertMissingNotWiped(t *testing.T) {
	d := newDemandDaemon(t, nil)
	a := newActivator(d.socket, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	t.Cleanup(a.close)
	a.CertMissing(ctx, "first.example.test")
	for i := range maxAsked + 10 {
		a.CertMissing(ctx, fmt.Sprintf("n%d.example.test", i))
	}
	a.CertMissing(ctx, "first.example.test")
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.names["first.example.test"]; c != 1 {
		t.Fatalf("first.example.test asked for %d times within demandEvery, want 1", c)
	}
}

// Handshakes for one name share one demand and its answer: those that
// come while it is on the wire wait for it. A name the daemon refuses is
// told no, and is not asked for again within demandEvery.
func TestCertMissingAnswerShared(t *testing.T) {
	release := make(chan struct{})
	d := newDemandDaemon(t, release)
	a := newActivator(d.socket, slog.New(slog.DiscardHandler))
	a.demandHC.Timeout = time.Minute
	t.Cleanup(a.close)
	ctx := context.Background()
	answers := make(chan bool, 3)
	for range 3 {
		go func() { answers <- a.CertMissing(ctx, "new.example.test") }()
	}
	deadline := time.Now().Add(30 * time.Second)
	for d.inFlight.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no demand sent")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case ok := <-answers:
		t.Fatalf("answered %v before the daemon did", ok)
	default:
	}
	close(release)
	for range 3 {
		if !<-answers {
			t.Fatal("a handshake told no while the daemon accepted the name")
		}
	}
	if p := d.posts.Load(); p != 1 {
		t.Fatalf("%d demands sent for one name, want 1", p)
	}

	refusing := newDemandDaemon(t, nil)
	refusing.code.Store(http.StatusForbidden)
	a2 := newActivator(refusing.socket, slog.New(slog.DiscardHandler))
	t.Cleanup(a2.close)
	for range 2 {
		if a2.CertMissing(ctx, "stranger.test") {
			t.Fatal("a refused name told yes")
		}
	}
	if p := refusing.posts.Load(); p != 1 {
		t.Fatalf("%d demands sent for a refused name, want 1", p)
	}
}
