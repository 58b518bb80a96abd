package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)

// stamped is text as a replica's log holds it, read at t0 + ms.
func stamped(ms int, text string) string {
	return t0.Add(time.Duration(ms)*time.Millisecond).Format(StampLayout) + " " + text
}

func TestParseLine(t *testing.T) {
	for _, c := range []struct {
		raw, text string
		at        time.Time
	}{
		{stamped(1, "hello"), "hello", t0.Add(time.Millisecond)},
		{stamped(0, ""), "", t0},
		{"hello world", "hello world", time.Time{}},
		{"2026-11-29T01:00:00.000000000Z", "2026-11-29T01:00:00.000000000Z", time.Time{}}, // no space after: text
		{"2026-13-29T01:00:00.000000000Z x", "2026-13-29T01:00:00.000000000Z x", time.Time{}},
	} {
		at, text := ParseLine(c.raw)
		if !at.Equal(c.at) || text != c.text {
			t.Errorf("ParseLine(%q) = %v, %q; want %v, %q", c.raw, at, text, c.at, c.text)
		}
	}
}

// texts shows merged lines as "ID:TEXT".
func texts(ls []LogLine) string {
	var s []string
	for _, l := range ls {
		s = append(s, l.Replica+":"+l.Text)
	}
	return strings.Join(s, " ")
}

// Replicas' lines merge by time, each replica's in its own order; --tail
// counts the merged lines, --since drops the older ones first.
func TestSelectLogs(t *testing.T) {
	a := LogLines("a", []string{stamped(1, "a1"), stamped(4, "a4"), "a4-cont", stamped(9, "a9")}, time.Time{})
	b := LogLines("b", []string{stamped(2, "b2"), stamped(3, "b3"), stamped(4, "b4"), stamped(10, "b10")}, time.Time{})
	c := LogLines("c", []string{"old", stamped(5, "c5")}, time.Time{})
	logs := [][]LogLine{a, b, c}
	for _, k := range []struct {
		since time.Time
		tail  int
		want  string
	}{
		{time.Time{}, 0, "c:old a:a1 b:b2 b:b3 a:a4 a:a4-cont b:b4 c:c5 a:a9 b:b10"},
		{time.Time{}, 3, "c:c5 a:a9 b:b10"},
		{time.Time{}, 6, "a:a4 a:a4-cont b:b4 c:c5 a:a9 b:b10"},
		{time.Time{}, 100, "c:old a:a1 b:b2 b:b3 a:a4 a:a4-cont b:b4 c:c5 a:a9 b:b10"},
		{t0.Add(4 * time.Millisecond), 0, "a:a4 a:a4-cont b:b4 c:c5 a:a9 b:b10"},
		{t0.Add(4 * time.Millisecond), 2, "a:a9 b:b10"},
		{t0.Add(time.Hour), 0, ""},
	} {
		if got := texts(SelectLogs(logs, k.since, k.tail)); got != k.want {
			t.Errorf("since %v tail %d:\n got %s\nwant %s", k.since, k.tail, got, k.want)
		}
	}
	if a[2].Time != t0.Add(4*time.Millisecond) || !c[0].Time.IsZero() {
		t.Errorf("an unstamped line takes the time before it: %v, %v", a[2].Time, c[0].Time)
	}
}

func TestWriteLogLine(t *testing.T) {
	var b strings.Builder
	l := LogLine{Replica: "web-1", Time: t0.Add(1500 * time.Microsecond), Text: "GET /"}
	WriteLogLine(&b, l, false)
	WriteLogLine(&b, l, true)
	WriteLogLine(&b, LogLine{Replica: "web-2", Text: "x"}, true)
	want := "web-1 | GET /\nweb-1 | 2026-11-29T01:00:00.001500000Z GET /\nweb-2 | - x\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// appendLog appends lines ms..ms+n-1 to the log at path.
func appendLog(t *testing.T, path string, ms, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := ms; i < ms+n; i++ {
		fmt.Fprintln(f, stamped(i, fmt.Sprintf("line %d", i)))
	}
}

// follow reads what the log gained and returns the texts read.
func follow(t *testing.T, path string, c *LogCursor) string {
	t.Helper()
	raw, nc, err := ReadLogFrom(path, *c)
	if err != nil {
		t.Fatal(err)
	}
	*c = nc
	return strings.Join(Texts(raw), ",")
}

// A follower reads each line once: what the log gained, a line still being
// written once whole, and across rotations, those before the copy (from
// the rotated copy) and after it.
func TestReadLogFrom(t *testing.T) {
	path := filepath.Join(t.TempDir(), "web-1.log")
	appendLog(t, path, 0, 3)
	lines, c, err := TailLogAt(path, 2)
	if err != nil || strings.Join(Texts(lines), ",") != "line 1,line 2" {
		t.Fatalf("tail: %q, %v", lines, err)
	}
	if got := follow(t, path, &c); got != "" {
		t.Fatalf("nothing new: %q", got)
	}
	appendLog(t, path, 3, 2)
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(stamped(5, "line 5 so f"))
	if got := follow(t, path, &c); got != "line 3,line 4" {
		t.Fatalf("new lines: %q", got)
	}
	f.WriteString("ar\n")
	f.Close()
	if got := follow(t, path, &c); got != "line 5 so far" {
		t.Fatalf("a line once whole: %q", got)
	}
	// Rotated with lines the follower has not read: read from the copy.
	appendLog(t, path, 6, 3)
	if err := RotateLog(path, 130); err != nil { // keeps lines 6-8
		t.Fatal(err)
	}
	appendLog(t, path, 9, 1)
	if got := follow(t, path, &c); got != "line 6,line 7,line 8,line 9" {
		t.Fatalf("across a rotation: %q", got)
	}
	// Rotated again, the log grown past the cursor's offset since.
	appendLog(t, path, 10, 2)
	if err := RotateLog(path, 100); err != nil { // keeps lines 10-11
		t.Fatal(err)
	}
	appendLog(t, path, 12, 20)
	want := []string{"line 10", "line 11"}
	for i := 12; i < 32; i++ {
		want = append(want, fmt.Sprintf("line %d", i))
	}
	if got := follow(t, path, &c); got != strings.Join(want, ",") {
		t.Fatalf("across a rotation, the log grown back: %q", got)
	}
	// Truncated, its copy seen: only what follows.
	if got := follow(t, path, &c); got != "" {
		t.Fatalf("nothing new: %q", got)
	}
}

// Lines of the same time are told apart by their count: after a rotation
// the follower skips as many of them as it read.
func TestReadLogFromSameTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "web-1.log")
	same := stamped(7, "")
	os.WriteFile(path, []byte(stamped(6, "x")+"\n"+same+"a\n"+same+"b\n"), 0o600)
	_, c, err := TailLogAt(path, 0)
	if err != nil || c.Same != 2 {
		t.Fatalf("cursor %+v, %v", c, err)
	}
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(same + "c\n")
	f.Close()
	if err := RotateLog(path, 4*33-1); err != nil { // keeps a, b and c
		t.Fatal(err)
	}
	if got := follow(t, path, &c); got != "c" {
		t.Fatalf("after a rotation: %q", got)
	}
}
