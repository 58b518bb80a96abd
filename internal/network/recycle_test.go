package network

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// mustBeEmpty fails unless the namespace at path holds no socket and no
// interface but lo, up.
func mustBeEmpty(t *testing.T, path string) {
	t.Helper()
	if err := checkEmpty(path); err != nil {
		t.Fatalf("namespace %s: %v", path, err)
	}
	if links := nsLinks(t, path); len(links) != 1 || links["lo"] == nil {
		t.Fatalf("interfaces %v, want only lo (up, with 127.0.0.1)", links)
	}
}

// waitSettled waits until the pool holds n namespaces of every mode, its
// target, so that the filler has nothing left to do.
func waitSettled(t *testing.T, m *Manager, n int) {
	t.Helper()
	waitReady(t, m, n)
	if m.short(None) {
		t.Fatalf("pool still short: %+v", m.Stats())
	}
}

func TestRecycleCleanComesBack(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, 2)
	m := newManager(t, o)
	waitSettled(t, m, 2)

	a, err := m.Acquire(ctx, "job1", None)
	if err != nil {
		t.Fatal(err)
	}
	// Used as a job would, without leaving anything behind: a UDP round
	// trip on its loopback, sockets closed.
	err = withNetNS(a.NSPath, func() error {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer pc.Close()
		c, err := net.Dial("udp4", pc.LocalAddr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	waitSettled(t, m, 2) // the pool made a replacement: it is full
	if err := m.Recycle(ctx, a); err != nil {
		t.Fatal(err)
	}
	s := m.Stats()
	if s.Reused != 1 || s.Dirty != 0 || s.Ready[None] != 2 || s.InUse != 0 {
		t.Fatalf("after Recycle: %+v; want it reused in a pool of 2", s)
	}
	if left, _ := os.ReadDir(o.StateDir); len(left) != 2+s.Ready[Bridge] {
		t.Fatalf("state dir holds %d namespaces, want the pool's only (a fresh one made way)", len(left))
	}

	b, err := m.Acquire(ctx, "job2", None)
	if err != nil {
		t.Fatal(err)
	}
	if b.NSPath != a.NSPath {
		t.Fatalf("Acquire after Recycle got %s, want the recycled %s", b.NSPath, a.NSPath)
	}
	mustBeEmpty(t, b.NSPath)
	// The first holder's attachment cannot end the second one's hold.
	if err := m.Recycle(ctx, a); !errdefs.IsConflict(err) {
		t.Fatalf("Recycle by a former holder: %v, want a conflict", err)
	}
	if err := m.Release(ctx, a); !errdefs.IsConflict(err) {
		t.Fatalf("Release by a former holder: %v, want a conflict", err)
	}
	if got, ok := m.Lookup("job2"); !ok || got.NSPath != b.NSPath {
		t.Fatalf("job2 lost its namespace: %+v, %v", got, ok)
	}
	if err := m.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	assertGone(t, o, b.NSPath)
}

// TestRecycledAreNotReplaced: once namespaces circulate, acquiring and
// recycling them makes none.
func TestRecycledAreNotReplaced(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, testOptions(t, 2))
	waitSettled(t, m, 2)
	created := m.Stats().Created
	for i := range 10 {
		a, err := m.Acquire(ctx, fmt.Sprint("cycle", i), None)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Recycle(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// The first Acquire took a fresh namespace, which the pool replaced
	// (or began to); after that only recycled ones went out.
	waitSettled(t, m, 2)
	s := m.Stats()
	if s.Reused != 10 || s.Created > created+1 || s.Misses != 0 {
		t.Fatalf("stats %+v: want 10 reused and at most one namespace made after the first %d", s, created)
	}
}

func TestRecycleDestroysDirtyNamespaces(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, 2)
	m := newManager(t, o)
	nsenter := func(path string, args ...string) error {
		out, err := exec.Command("nsenter", append([]string{"--net=" + path}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %v: %s", args, err, out)
		}
		return nil
	}
	for _, tc := range []struct {
		name  string
		dirty func(t *testing.T, path string) error
	}{
		{"tcp listener", func(t *testing.T, path string) error {
			listenIn(t, path, "127.0.0.1:0")
			return nil
		}},
		{"tcp time-wait", func(t *testing.T, path string) error {
			return withNetNS(path, func() error {
				// As in a namespace of another mode: None keeps none.
				if err := os.WriteFile("/proc/sys/net/ipv4/tcp_max_tw_buckets", []byte("4096"), 0); err != nil {
					return err
				}
				return timeWait()
			})
		}},
		{"udp6 socket", func(t *testing.T, path string) error {
			return withNetNS(path, func() error {
				pc, err := net.ListenPacket("udp6", "[::1]:0")
				if err == nil {
					t.Cleanup(func() { pc.Close() })
				}
				return err
			})
		}},
		{"unix socket", func(t *testing.T, path string) error {
			return withNetNS(path, func() error {
				ln, err := net.Listen("unix", "@shoal-recycle-test")
				if err == nil {
					t.Cleanup(func() { ln.Close() })
				}
				return err
			})
		}},
		{"unbound tcp socket", func(t *testing.T, path string) error {
			return withNetNS(path, func() error { return openSocket(t, unix.AF_INET6, unix.SOCK_STREAM, 0) })
		}},
		{"packet socket", func(t *testing.T, path string) error {
			return withNetNS(path, func() error {
				return openSocket(t, unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_ALL)))
			})
		}},
		{"netlink socket", func(t *testing.T, path string) error {
			return withNetNS(path, func() error { return openSocket(t, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE) })
		}},
		{"extra interfaces", func(t *testing.T, path string) error {
			return nsenter(path, "ip", "link", "add", "shoaltv0", "type", "veth", "peer", "name", "shoaltv1")
		}},
		{"lo down", func(t *testing.T, path string) error {
			return nsenter(path, "ip", "link", "set", "lo", "down")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waitSettled(t, m, 2)
			before := m.Stats()
			a, err := m.Acquire(ctx, "dirty", None)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.dirty(t, a.NSPath); err != nil {
				t.Fatal(err)
			}
			if err := m.Recycle(ctx, a); err != nil {
				t.Fatal(err)
			}
			assertGone(t, o, a.NSPath)
			if s := m.Stats(); s.Dirty != before.Dirty+1 || s.Reused != before.Reused {
				t.Fatalf("stats %+v: want one more dirty, none reused", s)
			}
		})
	}
}

// openSocket opens a socket in the calling thread's namespace, closed at
// the end of the test.
func openSocket(t *testing.T, family, typ, proto int) error {
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return err
	}
	t.Cleanup(func() { unix.Close(fd) })
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// timeWait leaves a TCP connection in TIME_WAIT in the calling thread's
// namespace, and no open socket.
func timeWait() error {
	if err := closeFirst(); err != nil {
		return err
	}
	b, err := os.ReadFile("/proc/thread-self/net/tcp")
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || strings.Fields(lines[1])[3] != "06" {
		return fmt.Errorf("want one connection in TIME_WAIT (06), got:\n%s", b)
	}
	return nil
}

// TestNoneKeepsNoTimeWait: in a None namespace the side of a TCP
// connection that closes first keeps nothing in TIME_WAIT, so the
// namespace is reused.
func TestNoneKeepsNoTimeWait(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, testOptions(t, 2))
	waitSettled(t, m, 2)
	before := m.Stats()
	a, err := m.Acquire(ctx, "tw", None)
	if err != nil {
		t.Fatal(err)
	}
	var table []byte
	if err := withNetNS(a.NSPath, func() error {
		if err := closeFirst(); err != nil {
			return err
		}
		table, err = os.ReadFile("/proc/thread-self/net/tcp")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(table)), "\n"); len(lines) != 1 {
		t.Fatalf("connections left:\n%s", table)
	}
	if err := m.Recycle(ctx, a); err != nil {
		t.Fatal(err)
	}
	if s := m.Stats(); s.Reused != before.Reused+1 {
		t.Fatalf("stats %+v after %+v: want the namespace reused", s, before)
	}
}

// closeFirst opens a loopback TCP connection and closes it from the
// client's side first: the side that waits, if any.
func closeFirst() error {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		return err
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		return err
	}
	c.Close() // the side that closes first waits
	buf := make([]byte, 1)
	s.Read(buf) // EOF: the FIN arrived
	s.Close()
	return ln.Close()
}

func TestRecycleNeverReusesBridge(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, 1)
	m := newManager(t, o)
	a, err := m.Acquire(ctx, "b", Bridge)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recycle(ctx, a); err != nil {
		t.Fatal(err)
	}
	assertGone(t, o, a.NSPath)
	if s := m.Stats(); s.Reused != 0 {
		t.Fatalf("stats %+v: a bridge namespace was reused", s)
	}
}

// TestRecycleKeepsPoolSize: a clean namespace takes the place of a fresh
// one in a full pool, but not of one that was recycled already.
func TestRecycleKeepsPoolSize(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, 1)
	m := newManager(t, o)
	waitSettled(t, m, 1)
	a1, err := m.Acquire(ctx, "c1", None)
	if err != nil {
		t.Fatal(err)
	}
	waitSettled(t, m, 1)
	if err := m.Recycle(ctx, a1); err != nil {
		t.Fatal(err)
	}
	a2, err := m.Acquire(ctx, "c2", None) // the recycled one
	if err != nil {
		t.Fatal(err)
	}
	waitSettled(t, m, 1) // one is kept ready although a2 is expected back
	a3, err := m.Acquire(ctx, "c3", None)
	if err != nil {
		t.Fatal(err)
	}
	waitSettled(t, m, 1)
	if err := m.Recycle(ctx, a2); err != nil {
		t.Fatal(err)
	}
	if err := m.Recycle(ctx, a3); err != nil { // pool full of recycled ones
		t.Fatal(err)
	}
	if a2.NSPath != a1.NSPath {
		t.Fatalf("second Acquire got %s, want the recycled %s", a2.NSPath, a1.NSPath)
	}
	assertGone(t, o, a3.NSPath)
	s := m.Stats()
	if s.Reused != 2 || s.Ready[None] != 1 {
		t.Fatalf("stats %+v: want 2 reused, 1 ready", s)
	}
	if left, _ := os.ReadDir(o.StateDir); len(left) != 1+s.Ready[Bridge] {
		t.Fatalf("state dir holds %v, want the pool's only", left)
	}
}

func TestRecycleRejects(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, testOptions(t, 1))
	waitSettled(t, m, 1)
	m.mu.Lock()
	pooled := m.pool[None][0].path
	m.mu.Unlock()
	if err := m.Recycle(ctx, &Attachment{NSPath: pooled}); !errdefs.IsConflict(err) {
		t.Fatalf("Recycle of a pooled namespace: %v, want a conflict", err)
	}
	mustInvalid(t, m.Recycle(ctx, &Attachment{NSPath: "/etc/passwd"}), "netns path")
	mustInvalid(t, m.Recycle(ctx, nil), "attachment")
}

// TestRestoreRemovesRecycled: a recycled namespace in the pool of a daemon
// that died is a pool leftover like any other.
func TestRestoreRemovesRecycled(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, 1)
	m1, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	waitSettled(t, m1, 1)
	a, err := m1.Acquire(ctx, "c", None)
	if err != nil {
		t.Fatal(err)
	}
	waitSettled(t, m1, 1)
	if err := m1.Recycle(ctx, a); err != nil {
		t.Fatal(err)
	}
	if s := m1.Stats(); s.Reused != 1 {
		t.Fatalf("not recycled: %+v", s)
	}
	waitReady(t, m1, 1)
	crash(m1)

	m2 := newManager(t, Options{StateDir: o.StateDir, CNIConfDir: o.CNIConfDir, Bridge: o.Bridge, Subnet: o.Subnet, PoolSize: -1})
	if err := m2.Restore(ctx, nil); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if left, _ := os.ReadDir(o.StateDir); len(left) != 0 {
		t.Fatalf("state dir holds %v after Restore, want nothing", left)
	}
	assertGone(t, o, a.NSPath)
	assertNoVeths(t, o)
}

// TestConcurrentRecycle: namespaces go out and back from many goroutines;
// none is handed to two holders at once and the pool stays in bounds.
func TestConcurrentRecycle(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, 2)
	m := newManager(t, o)
	var holders sync.Map // path → holder
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				id := fmt.Sprintf("g%d-%d", g, i)
				a, err := m.Acquire(ctx, id, None)
				if err != nil {
					errs <- err
					return
				}
				if other, dup := holders.LoadOrStore(a.NSPath, id); dup {
					errs <- fmt.Errorf("%s given to %s while %s holds it", a.NSPath, id, other)
				}
				holders.Delete(a.NSPath)
				give := m.Recycle
				if i%4 == 3 {
					give = m.Release
				}
				if err := give(ctx, a); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := m.Stats()
	if s.InUse != 0 || s.Ready[None] > 2 || s.Reused == 0 {
		t.Fatalf("stats %+v", s)
	}
	waitSettled(t, m, 2)
	if left, _ := os.ReadDir(o.StateDir); len(left) != 2+m.Stats().Ready[Bridge] {
		t.Fatalf("state dir holds %d namespaces, want the pool's only", len(left))
	}
}
