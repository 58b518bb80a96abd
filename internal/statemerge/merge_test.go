package statemerge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeTree writes files (relative path → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replicaState makes the state of one replica: data and work directories.
func replicaState(t *testing.T, root, id string, files map[string]string) (data, work string) {
	t.Helper()
	data, work = filepath.Join(root, id, "data"), filepath.Join(root, id, "work")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTree(t, data, files)
	return data, work
}

func TestMergeAppend(t *testing.T) {
	root := t.TempDir()
	vol := filepath.Join(root, "vol")
	writeTree(t, vol, map[string]string{"access.log": "old line\n"})
	var total int64
	for _, id := range []string{"r1", "r2", "r3"} {
		data, work := replicaState(t, root, id, map[string]string{
			"access.log":        id + " a\n" + id + " b\n",
			"nested/deep/x.log": id + " x\n",
		})
		res, err := Files(context.Background(), Append, data, work, vol)
		if err != nil {
			t.Fatal(err)
		}
		if res.Files != 2 || res.Bytes != 15 || len(res.Skipped) != 0 {
			t.Fatalf("%s: %+v", id, res)
		}
		total += res.Bytes
		if left, _, _ := listState(data); len(left) != 0 {
			t.Fatalf("%s: files left in the state after the merge: %v", id, left)
		}
	}
	if got, want := readFile(t, filepath.Join(vol, "access.log")), "old line\nr1 a\nr1 b\nr2 a\nr2 b\nr3 a\nr3 b\n"; got != want {
		t.Fatalf("access.log:\n%s\nwant:\n%s", got, want)
	}
	if got := readFile(t, filepath.Join(vol, "nested/deep/x.log")); got != "r1 x\nr2 x\nr3 x\n" {
		t.Fatalf("nested: %q", got)
	}
	if fi, err := os.Stat(filepath.Join(vol, "nested/deep/x.log")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("a created file keeps the state file's mode: %v, %v", fi.Mode(), err)
	}
	if total != 3*15 {
		t.Fatalf("bytes %d", total)
	}
}

// crash makes mergeStep fail at the n-th time step is reached (counting
// from 1), as a daemon killed there would stop.
func crash(t *testing.T, step string, n int) {
	t.Helper()
	seen := 0
	mergeStep = func(s, rel string) error {
		if s == step {
			seen++
			if seen == n {
				return fmt.Errorf("crash at %s of %s", s, rel)
			}
		}
		return nil
	}
	t.Cleanup(func() { mergeStep = func(string, string) error { return nil } })
}

func TestMergeAppendExactlyOnceAfterCrash(t *testing.T) {
	files := map[string]string{"a.log": "a1\na2\n", "b.log": "b1\n", "sub/c.log": "c1\nc2\nc3\n"}
	want := map[string]string{"a.log": "before\na1\na2\n", "b.log": "b1\n", "sub/c.log": "c0\nc1\nc2\nc3\n"}
	for _, step := range []string{"journal", "written", "removed"} {
		for n := 1; n <= 3; n++ {
			for _, torn := range []bool{false, true} {
				if (step == "journal" && n > 1) || (torn && step == "removed") {
					continue // one journal per batch; torn writes come before removals
				}
				t.Run(fmt.Sprintf("%s-%d-torn=%v", step, n, torn), func(t *testing.T) {
					root := t.TempDir()
					vol := filepath.Join(root, "vol")
					writeTree(t, vol, map[string]string{"a.log": "before\n", "sub/c.log": "c0\n"})
					data, work := replicaState(t, root, "r", files)
					crash(t, step, n)
					if _, err := Files(context.Background(), Append, data, work, vol); err == nil {
						t.Fatal("the crash did not stop the merge")
					}
					if torn {
						// The crash came in the middle of the next append:
						// part of a file reached its target.
						b, err := os.ReadFile(filepath.Join(work, journalName))
						if err != nil {
							t.Fatal(err)
						}
						var j appendJournal
						if err := json.Unmarshal(b, &j); err != nil {
							t.Fatal(err)
						}
						tore := ""
						for rel := range j.Offsets {
							if got, _ := os.ReadFile(filepath.Join(vol, rel)); !strings.HasSuffix(string(got), files[rel]) {
								tore = rel
								break
							}
						}
						if tore == "" {
							tore = "a.log" // all written: any tail past the journal's size goes
						}
						f, err := os.OpenFile(filepath.Join(vol, tore), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
						if err != nil {
							t.Fatal(err)
						}
						f.WriteString(files[tore][:2])
						f.Close()
					}
					mergeStep = func(string, string) error { return nil }
					if _, err := Files(context.Background(), Append, data, work, vol); err != nil {
						t.Fatal(err)
					}
					for rel, w := range want {
						if got := readFile(t, filepath.Join(vol, rel)); got != w {
							t.Errorf("%s: %q, want %q", rel, got, w)
						}
					}
					if _, err := os.Stat(filepath.Join(work, journalName)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("journal left: %v", err)
					}
					// A third run (the area not yet removed at the crash)
					// merges nothing more.
					res, err := Files(context.Background(), Append, data, work, vol)
					if err != nil || res.Files != 0 {
						t.Fatalf("merged again: %+v, %v", res, err)
					}
				})
			}
		}
	}
}

// More files than a batch: each batch is journalled on its own, and a
// crash in the second leaves the first merged.
func TestMergeAppendBatches(t *testing.T) {
	root := t.TempDir()
	vol := filepath.Join(root, "vol")
	files := map[string]string{}
	for i := 0; i < mergeBatch+10; i++ {
		files[fmt.Sprintf("f%03d", i)] = fmt.Sprintf("line %d\n", i)
	}
	data, work := replicaState(t, root, "r", files)
	crash(t, "written", mergeBatch+5)
	res, err := Files(context.Background(), Append, data, work, vol)
	if err == nil || res.Files != mergeBatch+5 {
		t.Fatalf("first run: %+v, %v", res, err)
	}
	mergeStep = func(string, string) error { return nil }
	res, err = Files(context.Background(), Append, data, work, vol)
	if err != nil || res.Files != 10 {
		t.Fatalf("second run: %+v, %v (the second batch again)", res, err)
	}
	for rel, content := range files {
		if got := readFile(t, filepath.Join(vol, rel)); got != content {
			t.Fatalf("%s: %q", rel, got)
		}
	}
}

func TestMergeNewest(t *testing.T) {
	root := t.TempDir()
	vol := filepath.Join(root, "vol")
	base := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	writeTree(t, vol, map[string]string{"cfg.json": "volume", "keep.txt": "volume keep"})
	os.Chtimes(filepath.Join(vol, "cfg.json"), base, base)
	os.Chtimes(filepath.Join(vol, "keep.txt"), base, base)
	type rep struct {
		id    string
		age   time.Duration // mtime relative to base
		files map[string]string
	}
	reps := []rep{
		{"r1", time.Hour, map[string]string{"cfg.json": "r1", "a/b/new.txt": "r1 new", "keep.txt": "r1 keep"}},
		{"r2", 2 * time.Hour, map[string]string{"cfg.json": "r2", "a/b/new.txt": "r2 new"}},
		{"r3", 30 * time.Minute, map[string]string{"cfg.json": "r3", "a/b/new.txt": "r3 new"}},
	}
	for _, r := range reps {
		data, work := replicaState(t, root, r.id, r.files)
		mt := base.Add(r.age)
		for rel := range r.files {
			if rel == "keep.txt" {
				os.Chtimes(filepath.Join(data, rel), base, base) // as new: the volume's copy stays
				continue
			}
			os.Chtimes(filepath.Join(data, rel), mt, mt)
		}
		res, err := Files(context.Background(), Newest, data, work, vol)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", r.id, res)
		switch r.id {
		case "r1":
			if res.Files != 2 || res.Kept != 1 {
				t.Fatalf("r1: %+v", res)
			}
		case "r3":
			if res.Files != 0 || res.Kept != 2 {
				t.Fatalf("r3 is older than r2: %+v", res)
			}
		}
	}
	for rel, want := range map[string]string{"cfg.json": "r2", "a/b/new.txt": "r2 new", "keep.txt": "volume keep"} {
		if got := readFile(t, filepath.Join(vol, rel)); got != want {
			t.Errorf("%s: %q, want %q", rel, got, want)
		}
	}
	fi, err := os.Stat(filepath.Join(vol, "cfg.json"))
	if err != nil || !fi.ModTime().Equal(base.Add(2*time.Hour)) {
		t.Fatalf("the copy keeps its modification time: %v, %v", fi.ModTime(), err)
	}
}

func TestMergeNewestAfterCrash(t *testing.T) {
	root := t.TempDir()
	vol := filepath.Join(root, "vol")
	data, work := replicaState(t, root, "r", map[string]string{"a": "A", "b": "B"})
	crash(t, "written", 2)
	if _, err := Files(context.Background(), Newest, data, work, vol); err == nil {
		t.Fatal("no crash")
	}
	mergeStep = func(string, string) error { return nil }
	res, err := Files(context.Background(), Newest, data, work, vol)
	if err != nil || res.Files != 0 || res.Kept != 2 {
		t.Fatalf("rerun: %+v, %v (a and b were in place already)", res, err)
	}
	if readFile(t, filepath.Join(vol, "a")) != "A" || readFile(t, filepath.Join(vol, "b")) != "B" {
		t.Fatal("content")
	}
}

func TestMergeSymlinksStayInTheVolume(t *testing.T) {
	for _, policy := range []string{Append, Newest} {
		t.Run(policy, func(t *testing.T) {
			root := t.TempDir()
			vol, outside := filepath.Join(root, "vol"), filepath.Join(root, "outside")
			writeTree(t, outside, map[string]string{"secret": "secret\n"})
			writeTree(t, vol, map[string]string{"ok.log": "v\n"})
			data, work := replicaState(t, root, "r", map[string]string{"ok.log": "r\n"})
			// Links in the replica's state are not followed, wherever
			// they point.
			os.Symlink(filepath.Join(outside, "secret"), filepath.Join(data, "abs-link"))
			os.MkdirAll(filepath.Join(data, "d"), 0o755)
			os.Symlink("../../../outside/secret", filepath.Join(data, "d", "rel-link"))
			os.Symlink(outside, filepath.Join(data, "dirlink"))
			syscall.Mkfifo(filepath.Join(data, "fifo"), 0o600)
			res, err := Files(context.Background(), policy, data, work, vol)
			if err != nil {
				t.Fatal(err)
			}
			if res.Files != 1 || len(res.Skipped) != 4 {
				t.Fatalf("%+v", res)
			}
			if s := SortedSkipped(res.Skipped, 5); !strings.Contains(s, "abs-link (symlink)") || !strings.Contains(s, "fifo (fifo)") {
				t.Fatalf("skipped %s", s)
			}
			for _, p := range []string{"abs-link", "d/rel-link", "dirlink", "fifo"} {
				if _, err := os.Lstat(filepath.Join(vol, p)); err == nil {
					t.Errorf("%s reached the volume", p)
				}
			}
			if got := readFile(t, filepath.Join(outside, "secret")); got != "secret\n" {
				t.Fatalf("outside file changed: %q", got)
			}
		})
	}
}

func TestMergeRefusesVolumeLinksOut(t *testing.T) {
	for _, policy := range []string{Append, Newest} {
		t.Run(policy, func(t *testing.T) {
			root := t.TempDir()
			vol, outside := filepath.Join(root, "vol"), filepath.Join(root, "outside")
			writeTree(t, outside, map[string]string{"passwd": "root\n"})
			os.MkdirAll(vol, 0o755)
			// A replica that shares the volume planted links out of it.
			os.Symlink(outside, filepath.Join(vol, "logs"))
			os.Symlink(filepath.Join(outside, "passwd"), filepath.Join(vol, "passwd"))
			for _, rel := range []string{"logs/x.log", "passwd"} {
				data, work := replicaState(t, root, "r-"+filepath.Base(rel), map[string]string{rel: "evil\n"})
				_, err := Files(context.Background(), policy, data, work, vol)
				if err == nil {
					t.Errorf("%s: merged through a link out of the volume", rel)
				}
				t.Logf("%s: %v", rel, err)
				if _, err := os.Stat(filepath.Join(data, rel)); err != nil {
					t.Errorf("%s: a refused file must stay in the state: %v", rel, err)
				}
			}
			if got := readFile(t, filepath.Join(outside, "passwd")); got != "root\n" {
				t.Fatalf("written outside the volume: %q", got)
			}
			if _, err := os.Stat(filepath.Join(outside, "x.log")); err == nil {
				t.Fatal("created outside the volume")
			}
		})
	}
}

// BenchmarkMerge merges the state of one replica, 100 files of 1 KiB, into
// a volume (one op); the directories are under $SHOAL_BENCH_DIR, else the
// test's temporary directory.
func BenchmarkMerge(b *testing.B) {
	for _, policy := range []string{Append, Newest} {
		b.Run(policy, func(b *testing.B) {
			base := os.Getenv("SHOAL_BENCH_DIR")
			if base == "" {
				base = b.TempDir()
			}
			root, err := os.MkdirTemp(base, "merge")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(root)
			vol := filepath.Join(root, "vol")
			line := strings.Repeat("x", 1023) + "\n"
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				data := filepath.Join(root, fmt.Sprint(i), "data")
				for f := 0; f < 100; f++ {
					p := filepath.Join(data, fmt.Sprintf("d%d", f%10), fmt.Sprintf("f%d.log", f))
					os.MkdirAll(filepath.Dir(p), 0o755)
					if err := os.WriteFile(p, []byte(line), 0o644); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				res, err := Files(context.Background(), policy, data, filepath.Join(root, fmt.Sprint(i), "work"), vol)
				if err != nil || res.Files != 100 {
					b.Fatalf("%+v, %v", res, err)
				}
			}
		})
	}
}

// A merge cut short leaves a journal and makes its area's change time newer
// than areas retired after it; the area must still be merged again first,
// or its recovery would cut off what a later area appended meanwhile.
func TestMergeCutShortGoesFirst(t *testing.T) {
	root := t.TempDir()
	gone, vol := filepath.Join(root, "gone"), filepath.Join(root, "vol")
	dataA, workA := replicaState(t, gone, "a", map[string]string{"log": "a\n"})
	time.Sleep(10 * time.Millisecond) // distinct change times, not a timing assertion
	dataB, workB := replicaState(t, gone, "b", map[string]string{"log": "b\n"})
	if got := Retired(gone); len(got) != 2 || got[0].Name() != "a" {
		t.Fatalf("retired order %v, want a first", got)
	}
	crash := errors.New("crash")
	mergeStep = func(step, rel string) error {
		if step == "written" {
			return crash
		}
		return nil
	}
	_, err := Files(context.Background(), Append, dataA, workA, vol)
	mergeStep = func(string, string) error { return nil }
	if !errors.Is(err, crash) {
		t.Fatalf("cut short: %v", err)
	}
	if !HasJournal(filepath.Join(gone, "a")) {
		t.Fatal("no journal after a merge cut short")
	}
	got := Retired(gone)
	if len(got) != 2 || got[0].Name() != "a" {
		t.Fatalf("after the cut: order %v, want a (journal) first", got)
	}
	for _, e := range got {
		data, work := dataA, workA
		if e.Name() == "b" {
			data, work = dataB, workB
		}
		if _, err := Files(context.Background(), Append, data, work, vol); err != nil {
			t.Fatal(err)
		}
	}
	if s := readFile(t, filepath.Join(vol, "log")); s != "a\nb\n" {
		t.Fatalf("volume log %q, want each line once", s)
	}
}
