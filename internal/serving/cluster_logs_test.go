package serving

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/node"
)

// The leader reads the log of a replica on another node from that node:
// `shoal app logs` shows every replica's lines, wherever it runs, and a
// replica that crashes there leaves the end of its log on the app. A node
// that does not answer is named in place of its replica's log.
func TestClusterRemoteLogs(t *testing.T) {
	h := newClusterHarness(t)
	ctx := context.Background()
	h.lead()
	h.deploy("min = 3\nmax = 3")
	h.wait("3 ready replicas", func() bool { return len(h.replicas()["ready"]) == 3 })
	h.placed(3)
	byNode := map[string]string{}
	for id, n := range h.nodesOf() {
		byNode[n] = id
	}
	// Stamped as the log writer stamps them, n3's line before n2's.
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, n := range []string{"n3", "n2"} {
		line := at.Add(time.Duration(i)*time.Millisecond).Format(node.StampLayout) + " hello from " + n + "\n"
		if err := h.remote[n].rt.write(byNode[n], []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := h.m.Logs(ctx, "hello", types.LogsRequest{Tail: 0}, &out); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{byNode["n1"] + " | " + byNode["n1"] + " started"}
	for _, n := range []string{"n2", "n3"} {
		id := byNode[n]
		want = append(want, id+" | "+id+" started", id+" | hello from "+n)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("logs:\n got %q\nwant %q", got, want)
	}
	// --tail counts the lines merged by time, across the nodes.
	out.Reset()
	want2 := byNode["n3"] + " | hello from n3\n" + byNode["n2"] + " | hello from n2\n"
	if err := h.m.Logs(ctx, "hello", types.LogsRequest{Tail: 2}, &out); err != nil || out.String() != want2 {
		t.Fatalf("logs --tail 2: %q, %v; want %q", out.String(), err, want2)
	}
	out.Reset()
	if err := h.m.Logs(ctx, "hello", types.LogsRequest{Tail: 1, Replica: byNode["n3"][:len(byNode["n3"])-2]}, &out); err != nil ||
		out.String() != byNode["n3"]+" | hello from n3\n" {
		t.Fatalf("logs --tail 1 --replica %s: %q, %v", byNode["n3"], out.String(), err)
	}

	crashed := byNode["n2"]
	h.remote["n2"].rt.write(crashed, []byte("boom on n2\n"))
	h.remote["n2"].rt.exit(crashed, 1)
	h.wait("the crash seen", func() bool {
		a, err := h.m.Get(ctx, "hello")
		return err == nil && a.Error != ""
	})
	a, err := h.m.Get(ctx, "hello")
	if err != nil || !slices.Contains(a.Log, "boom on n2") {
		t.Fatalf("app after a crash on n2: log %q, %v; want its last lines", a.Log, err)
	}

	h.remote["n3"].mute.Store(true)
	out.Reset()
	if err := h.m.Logs(ctx, "hello", types.LogsRequest{Tail: 5}, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, byNode["n3"]+" | (log not read: ") || !strings.Contains(s, "does not answer") {
		t.Fatalf("logs with n3 silent: %q", s)
	}
}

// `shoal app logs --follow` on the leader goes on with the lines that
// replicas on other nodes write, read there through their nodes.
func TestClusterFollowLogs(t *testing.T) {
	h := newClusterHarness(t)
	h.lead()
	h.deploy("min = 3\nmax = 3")
	h.wait("3 ready replicas", func() bool { return len(h.replicas()["ready"]) == 3 })
	h.placed(3)
	byNode := map[string]string{}
	for id, n := range h.nodesOf() {
		byNode[n] = id
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- h.m.Logs(ctx, "hello", types.LogsRequest{Tail: 1, Follow: true}, &out) }()
	h.wait("the first lines", func() bool { return strings.Count(out.String(), " started\n") == 1 })
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, n := range []string{"n2", "n3"} {
		line := at.Add(time.Duration(i)*time.Millisecond).Format(node.StampLayout) + " later on " + n + "\n"
		if err := h.remote[n].rt.write(byNode[n], []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	want := byNode["n2"] + " | later on n2\n" + byNode["n3"] + " | later on n3\n"
	h.advanceUntil("the other nodes' new lines followed", logPoll, func() bool { return strings.HasSuffix(out.String(), want) })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow ended with %v", err)
	}
}
