package network

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// inNetNS starts a process in the namespace at path and opens its /proc
// directory.
func inNetNS(t testing.TB, path string) (*exec.Cmd, *os.Root) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+path, "sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// nsenter execs sleep once it has joined: wait for that.
	for i := 0; ; i++ {
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm"); string(comm) == "sleep\n" {
			break
		}
		if i == 10000 {
			t.Fatal("nsenter never ran sleep")
		}
	}
	proc, err := os.OpenRoot("/proc/" + strconv.Itoa(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Close() })
	return cmd, proc
}

// TestCheckEmptyOf: a process's None namespace is found clean through its
// /proc directory, and not once it holds a socket; once the process is
// gone the check fails rather than read another's.
func TestCheckEmptyOf(t *testing.T) {
	m := newManager(t, testOptions(t, 1))
	a, err := m.Acquire(context.Background(), "checkof", None)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Release(context.Background(), a) })
	cmd, proc := inNetNS(t, a.NSPath)
	if err := CheckEmptyOf(proc); err != nil {
		t.Fatalf("a fresh namespace: %v", err)
	}
	ln := listenIn(t, a.NSPath, "127.0.0.1:0")
	if err := CheckEmptyOf(proc); err == nil {
		t.Fatal("a namespace with a listener: found clean")
	}
	ln.Close()
	cmd.Process.Kill()
	cmd.Wait()
	if err := CheckEmptyOf(proc); err == nil {
		t.Fatal("the namespace of a process gone: found clean")
	}
}

// BenchmarkCheckEmptyOf is the check of a reusable job sandbox's
// namespace, beside BenchmarkCheckEmpty's.
func BenchmarkCheckEmptyOf(b *testing.B) {
	m := newManager(b, testOptions(b, -1))
	a, err := m.Acquire(context.Background(), "checkof", None)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Release(context.Background(), a) })
	_, proc := inNetNS(b, a.NSPath)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := CheckEmptyOf(proc); err != nil {
			b.Fatal(err)
		}
	}
}
