package serving

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// A log over the limit keeps its last whole lines in .1 and starts empty;
// the writer, appending, goes on at the new end; tailLog reads across both.
func TestRotateLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.log")
	w, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; i < 100; i++ {
		w.WriteString(strings.Repeat("x", 18) + "\n") // 19 bytes
	}
	if err := rotateLog(path, 1900); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".1"); !os.IsNotExist(err) {
		t.Fatalf("a log at the limit was rotated: %v", err)
	}
	w.WriteString("one\ntwo\n")
	if err := rotateLog(path, 1000); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if len(cur) != 0 || len(old) > 1000 || !bytes.HasSuffix(old, []byte("x\none\ntwo\n")) || old[0] != 'x' {
		t.Fatalf("after rotation: log %q, .1 %d bytes ending %q", cur, len(old), old[max(len(old)-30, 0):])
	}
	for _, l := range strings.Split(strings.TrimSuffix(string(old), "\n"), "\n") {
		if l != "one" && l != "two" && l != strings.Repeat("x", 18) {
			t.Fatalf(".1 holds a cut line %q", l)
		}
	}
	w.WriteString("three\n")
	if cur, _ := os.ReadFile(path); string(cur) != "three\n" {
		t.Fatalf("a write after the rotation: log %q, want %q", cur, "three\n")
	}
	if got := tailLog(path, 3); !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Fatalf("tailLog across the rotation: %q", got)
	}
	if got := tailLog(path, 0); len(got) != bytes.Count(old, []byte("\n"))+1 || got[len(got)-1] != "three" {
		t.Fatalf("tailLog(0): %d lines ending %q", len(got), got[len(got)-1])
	}
}

// A replica's log is checked every second, whatever its health check's
// interval (an hour here): it never holds much more than logMax.
func TestReplicaLogTrimmedEverySecond(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1", "[health]", "interval = \"1h\"")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	log := h.m.app("hello").logs.path(id)
	line := strings.Repeat("z", 99) + "\n"
	if err := h.rt.write(id, []byte(strings.Repeat(line, 2*logMax/100))); err != nil {
		t.Fatal(err)
	}
	h.advanceUntil("the log is cut to logMax", time.Second, func() bool {
		fi, err := os.Stat(log)
		return err == nil && fi.Size() < logMax
	})
}

// A replica's log is kept under logMax while it runs, and once replicas are
// gone only the keepLogs most recent of their logs stay: here eight crashes
// in a row leave the logs of the last five crashed replicas, the failed one
// still listed, and the running one.
func TestReplicaLogsCappedAndPruned(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	ctl := h.m.app("hello")
	first := h.replicas()[StateReady][0]
	log := ctl.logs.path(first)
	line := strings.Repeat("y", 99) + "\n"
	if err := h.rt.write(first, []byte(strings.Repeat(line, logMax/100+logMax/200)+"before\n")); err != nil {
		t.Fatal(err)
	}
	h.advanceUntil("the log is rotated", time.Second, func() bool {
		fi, err := os.Stat(log)
		return err == nil && fi.Size() < logMax
	})
	if fi, err := os.Stat(log + ".1"); err != nil || fi.Size() > logMax {
		t.Fatalf("rotated log: %v, %v bytes (limit %d)", err, fi.Size(), logMax)
	}
	h.rt.write(first, []byte("after\n"))
	var out bytes.Buffer
	if err := h.m.Logs(context.Background(), "hello", types.LogsRequest{Tail: 2}, &out); err != nil {
		t.Fatal(err)
	}
	if want := first + " | before\n" + first + " | after\n"; out.String() != want {
		t.Fatalf("logs --tail 2 after the rotation: %q, want %q", out.String(), want)
	}

	logs := func() []string {
		var got []string
		ents, _ := os.ReadDir(ctl.logs.dir)
		for _, e := range ents {
			got = append(got, e.Name())
		}
		return got
	}
	ids := []string{first}
	for i := 0; i < 8; i++ {
		old := ids[len(ids)-1]
		h.rt.exit(old, 1)
		newReady := func() bool {
			r := h.replicas()[StateReady]
			return len(r) == 1 && r[0] != old
		}
		if i == 0 {
			// It served for longer than the back-off: replaced at once.
			h.wait("the first replica is replaced", func() bool { _, err := h.rt.get(old); return err != nil && newReady() })
		} else {
			// The others crash as soon as they are ready (a crash loop):
			// the removal prunes the logs while the crashed one is listed
			// (failed), and of the i gone before it keeps the five most
			// recent.
			h.wait("the crash is seen", func() bool {
				_, err := h.rt.get(old)
				return err != nil && len(h.replicas()[StateFailed]) == 1
			})
			h.wait("the logs are pruned", func() bool {
				n := 0
				for _, name := range logs() {
					if strings.HasSuffix(name, ".log") {
						n++
					}
				}
				return n == min(i, 5)+1
			})
			h.advance(time.Minute) // past the back-off
			h.wait("a new replica", newReady)
		}
		ids = append(ids, h.replicas()[StateReady][0])
	}
	// ids[8] runs; ids[7] failed last and was listed at the last prune;
	// of the ones gone then, ids[2:7] are the five most recent.
	want := slices.Sorted(slices.Values(ids[2:]))
	h.wait("old logs pruned", func() bool { return len(logs()) == len(want) })
	for i, name := range logs() {
		if name != want[i]+".log" {
			t.Fatalf("logs kept: %v; want the logs of %v", logs(), want)
		}
	}
	out.Reset()
	if err := h.m.Logs(context.Background(), "hello", types.LogsRequest{Tail: 0}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), ids[7]+" | "+ids[7]+" started") {
		t.Fatalf("logs do not show the last crashed replica %s:\n%s", ids[7], out.String())
	}
}
