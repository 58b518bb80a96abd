package serving

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/node"
)

// syncBuffer is a bytes.Buffer that a follow writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `shoal app logs --follow` goes on with the lines written after it
// began, the lines of a replica started since (from its first), and a
// replica's last lines once it has exited; it ends with its request.
func TestLogsFollow(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	first := h.replicas()[StateReady][0]
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stamped := func(ms int, text string) []byte {
		return []byte(at.Add(time.Duration(ms)*time.Millisecond).Format(node.StampLayout) + " " + text + "\n")
	}
	h.rt.write(first, stamped(1, "before"))

	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- h.m.Logs(ctx, "hello", types.LogsRequest{Tail: 1, Follow: true, Timestamps: true}, &out)
	}()
	h.wait("the last line", func() bool { return out.String() != "" })
	if want := first + " | 2026-01-02T03:04:05.001000000Z before\n"; out.String() != want {
		t.Fatalf("logs -f --tail 1 -t: %q, want %q", out.String(), want)
	}

	h.rt.write(first, stamped(2, "after"))
	h.advanceUntil("a new line followed", logPoll, func() bool { return strings.Contains(out.String(), first+" | 2026-01-02T03:04:05.002000000Z after\n") })

	two := 2
	if _, err := h.m.Scale(context.Background(), "hello", types.ScaleRequest{Min: &two, Max: &two}); err != nil {
		t.Fatal(err)
	}
	h.wait("a second replica", func() bool { return len(h.replicas()[StateReady]) == 2 })
	var second string
	for _, id := range h.replicas()[StateReady] {
		if id != first {
			second = id
		}
	}
	h.advanceUntil("the new replica's first line", logPoll, func() bool { return strings.Contains(out.String(), second+" | - "+second+" started\n") })

	h.rt.write(first, stamped(3, "last words"))
	h.rt.exit(first, 1)
	h.wait("the crash is seen", func() bool { _, err := h.rt.get(first); return err != nil })
	h.advanceUntil("the gone replica's last line", logPoll, func() bool {
		return strings.Contains(out.String(), first+" | 2026-01-02T03:04:05.003000000Z last words\n")
	})
	if n := strings.Count(out.String(), "before"); n != 1 {
		t.Fatalf("a line shown %d times:\n%s", n, out.String())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("follow ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("follow did not end with its request")
	}
}

// Without --follow, the lines of the app's replicas come merged by time,
// --tail counting the merged lines, --since and --replica selecting.
func TestLogsMergedSinceReplica(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 2\nmax = 2")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 2 })
	ids := h.replicas()[StateReady]
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := 0; i < 6; i++ {
		line := at.Add(time.Duration(i)*time.Second).Format(node.StampLayout) + " line " + string(rune('0'+i)) + "\n"
		h.rt.write(ids[i%2], []byte(line))
	}
	logs := func(req types.LogsRequest) string {
		var out bytes.Buffer
		if err := h.m.Logs(context.Background(), "hello", req, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	a, b := ids[0], ids[1]
	if got, want := logs(types.LogsRequest{Tail: 3}), b+" | line 3\n"+a+" | line 4\n"+b+" | line 5\n"; got != want {
		t.Errorf("--tail 3: %q, want %q", got, want)
	}
	if got, want := logs(types.LogsRequest{Since: at.Add(4 * time.Second)}), a+" | line 4\n"+b+" | line 5\n"; got != want {
		t.Errorf("--since: %q, want %q", got, want)
	}
	if got, want := logs(types.LogsRequest{Tail: 2, Replica: a}), a+" | line 2\n"+a+" | line 4\n"; got != want {
		t.Errorf("--replica %s --tail 2: %q, want %q", a, got, want)
	}
}
