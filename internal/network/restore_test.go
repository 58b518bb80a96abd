package network

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// crash stops m's pool filler and forgets m without tearing anything
// down, as a daemon that dies does.
func crash(m *Manager) {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	<-m.done
}

func TestRestoreKeepsInUseAndRemovesTheRest(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, 1)
	m1, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, m1, 1) // pool leftovers: one per mode
	keepB, err := m1.Acquire(ctx, "keep-bridge", Bridge)
	if err != nil {
		t.Fatal(err)
	}
	keepN, err := m1.Acquire(ctx, "keep-none", None)
	if err != nil {
		t.Fatal(err)
	}
	goneB, err := m1.Acquire(ctx, "gone-bridge", Bridge)
	if err != nil {
		t.Fatal(err)
	}
	// A namespace that vanished without a CNI DEL, as after a reboot that
	// emptied the state dir: its address is still reserved.
	lostB, err := m1.Acquire(ctx, "lost-bridge", Bridge)
	if err != nil {
		t.Fatal(err)
	}
	if err := destroyNetNS(lostB.NSPath); err != nil {
		t.Fatal(err)
	}
	waitReady(t, m1, 1)
	crash(m1)

	m2 := newManager(t, Options{StateDir: o.StateDir, CNIConfDir: o.CNIConfDir, Bridge: o.Bridge, Subnet: o.Subnet, PoolSize: -1})
	inUse := map[string]string{"keep-bridge": keepB.NSPath, "keep-none": keepN.NSPath}
	if err := m2.Restore(ctx, inUse); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	left, _ := os.ReadDir(o.StateDir)
	if len(left) != 2 {
		t.Fatalf("state dir holds %v, want only the two kept namespaces", left)
	}
	assertGone(t, o, goneB.NSPath)
	assertGone(t, o, lostB.NSPath)

	a, ok := m2.Lookup("keep-bridge")
	if !ok || !a.IP.Equal(keepB.IP) || a.NSPath != keepB.NSPath || a.Mode != Bridge {
		t.Fatalf("Lookup after Restore = %+v, %v; want %+v", a, ok, keepB)
	}
	// The kept namespace still works, reached from the host.
	ln := listenIn(t, keepB.NSPath, net.JoinHostPort(keepB.IP.String(), "0"))
	c, err := dialIn("", ln.Addr().String())
	if err != nil {
		t.Fatalf("host to kept namespace: %v", err)
	}
	roundTrip(t, c)
	ln.Close()

	if err := m2.Restore(ctx, inUse); err != nil {
		t.Fatalf("second Restore: %v", err)
	}
	if s := m2.Stats(); s.InUse != 2 {
		t.Fatalf("in use after Restore: %+v", s)
	}
	for _, id := range []string{"keep-bridge", "keep-none"} {
		a, _ := m2.Lookup(id)
		if err := m2.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		assertGone(t, o, a.NSPath)
	}
	assertNoVeths(t, o)
	if left, _ := os.ReadDir(filepath.Join(o.CNIConfDir, "ipam", "shoal-"+o.Bridge)); countAddrs(left) > 0 {
		t.Fatalf("address reservations left: %v", left)
	}
}

func TestRestoreRejectsForeignPath(t *testing.T) {
	o := testOptions(t, -1)
	m := newManager(t, o)
	err := m.Restore(context.Background(), map[string]string{"c": "/var/run/netns/other"})
	mustInvalid(t, err, "netns path")
}

// A state dir still bound onto itself by a manager that was killed before
// it closed is taken over: the next manager unbinds it when it closes idle.
func TestLeftBindUndoneAtClose(t *testing.T) {
	o := testOptions(t, 0)
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(o.StateDir, o.StateDir, "none", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	m, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, _ := isMountPoint(o.StateDir); ok {
		t.Fatalf("state dir %s still bound after Close", o.StateDir)
	}
}

// A daemon killed while it made a namespace leaves the empty file it was
// to bind the namespace onto: the next daemon removes it and starts.
func TestRestoreRemovesHalfMadeNamespace(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	m1 := newManager(t, o)
	crash(m1)
	for _, name := range []string{"bridge-00112233aabbccdd", "none-00112233aabbccdd"} {
		if err := os.WriteFile(filepath.Join(o.StateDir, name), nil, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	m2 := newManager(t, Options{StateDir: o.StateDir, CNIConfDir: o.CNIConfDir, Bridge: o.Bridge, Subnet: o.Subnet, PoolSize: -1})
	if err := m2.Restore(ctx, nil); err != nil {
		t.Fatalf("Restore over half-made namespace files: %v", err)
	}
	if left, _ := os.ReadDir(o.StateDir); len(left) != 0 {
		t.Fatalf("state dir holds %v, want nothing", left)
	}
}
