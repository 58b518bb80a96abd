package manifest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// fill repeats unit until the file is about size bytes (head and tail kept).
func fill(head, unit, tail string, size int) []byte {
	var b bytes.Buffer
	b.WriteString(head)
	for b.Len()+len(unit)+len(tail) <= size {
		b.WriteString(unit)
	}
	b.WriteString(tail)
	return b.Bytes()
}

// nest opens n levels with open, puts mid inside and closes them.
func nest(head, open, mid, close string, size int) []byte {
	n := (size - len(head) - len(mid)) / (len(open) + len(close))
	return []byte(head + strings.Repeat(open, n) + mid + strings.Repeat(close, n))
}

// adversarial are shoal.toml files of MaxFileSize (and one of 1 MiB),
// each shaped to make a parser spend: deep, wide, long or many.
func adversarial() []struct {
	name string
	data []byte
} {
	const size = MaxFileSize - 64
	base := "name = \"web\"\nimage = \"web:1\"\n"
	var wide strings.Builder
	wide.WriteString("x = [")
	for wide.Len() < size-4096 {
		wide.WriteString("[" + strings.Repeat("1,", 1000) + "1],")
	}
	wide.WriteString("]\n")
	return []struct {
		name string
		data []byte
	}{
		{"deep inline tables", nest(base+"x = ", "{a=", "1", "}", size)},
		{"deep inline tables unclosed", fill(base+"x = ", "{a=", "", size)},
		{"deep arrays", nest(base+"x = ", "[", "1", "]", size)},
		{"deep arrays of tables", nest(base+"x = ", "[{a=", "1", "}]", size)},
		{"deep dotted key", []byte(base + strings.Repeat("a.", size/2-20) + "a = 1\n")},
		{"deep table header", []byte(base + "[" + strings.Repeat("a.", size/2-20) + "a]\n")},
		{"deep array of tables headers", fill(base, "[[a.b.c.d.e.f.g.h]]\n", "", size)},
		{"long quoted key", []byte(base + "\"" + strings.Repeat("k", size-40) + "\" = 1\n")},
		{"many keys", fill(base+"[env]\n", "K = \"v\"\n", "", size)},
		{"many distinct keys", []byte(base + "[env]\n" + distinctKeys(size))},
		{"many tables", fill(base, "[t]\n", "", size)},
		{"many arrays of tables", fill(base, "[[t]]\n", "", size)},
		{"many inline keys", fill(base+"x = {", "a=1,", "a=1}\n", size)},
		{"long array", fill(base+"command = [", "\"a\",", "\"a\"]\n", size)},
		{"wide nested arrays", []byte(base + wide.String())},
		{"huge basic string", []byte(base + "x = \"" + strings.Repeat("a", size-40) + "\"\n")},
		{"huge literal string", []byte(base + "x = '" + strings.Repeat("a", size-40) + "'\n")},
		{"huge multi-line string of brackets", []byte(base + "x = \"\"\"\n" + strings.Repeat("[{\\\"\n", (size-40)/5) + "\"\"\"\n")},
		{"multi-line strings of brackets", fill(base+"x = [", "'''"+strings.Repeat("[{{[", MaxStringLen/4-1)+"''',", "1]\n", size)},
		{"comments of brackets", fill(base+"x = [\n", "# [[[[{{{{ \"\"\" '''\n", "]\n", size)},
		{"comment lines", fill(base, "#\n", "x = 1\n", size)},
		{"blank lines in an array", fill(base+"x = [", "\n", "]\n", size)},
		{"blanks in an array", fill(base+"x = [", " ", "]\n", size)},
		{"strings of escapes", fill(base+"x = [", "\""+strings.Repeat("\\u00e9\\\"", MaxStringLen/8-1)+"\",", "1]\n", size)},
		{"strings of multi-byte characters", fill(base+"x = [", "'"+strings.Repeat("é", MaxStringLen/2-1)+"',", "1]\n", size)},
		{"over the size limit", []byte(base + strings.Repeat("#", MaxFileSize))},
		{"1 MiB of nested inline tables", nest(base+"x = ", "{a=", "1", "}", 1<<20)},
	}
}

func distinctKeys(size int) string {
	var b strings.Builder
	for i := 0; b.Len() < size-128; i++ {
		fmt.Fprintf(&b, "K%d = \"v\"\n", i)
	}
	return b.String()
}

// Every adversarial manifest is refused, as an invalid input naming the
// file, cheaply: under 10 MB allocated (the TOML parser took about 1.2 GB
// for 20 KB of nested inline tables; the CPU time is BenchmarkParseAdversarial's).
func TestAdversarialManifestsCheap(t *testing.T) {
	for _, tc := range adversarial() {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.name, "size limit") && !strings.HasPrefix(tc.name, "1 MiB") && len(tc.data) > MaxFileSize {
				t.Fatalf("the case is %d bytes, above the size limit", len(tc.data))
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Parse(tc.data, "app.toml")
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			if err == nil || !errdefs.IsInvalid(err) || !strings.HasPrefix(err.Error(), "app.toml: ") {
				t.Errorf("%d bytes: error %v, want an invalid input naming the file", len(tc.data), err)
			}
			if alloc > 10<<20 {
				t.Errorf("%d bytes: %d bytes allocated to refuse it (%v), want under 10 MB", len(tc.data), alloc, err)
			}
			t.Logf("%d bytes: %.2f MB allocated: %v", len(tc.data), float64(alloc)/(1<<20), trim(err))
		})
	}
}

func trim(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// The limits' errors name the line and the limit.
func TestLimitErrors(t *testing.T) {
	const base = "name = \"web\"\nimage = \"web:1\"\n"
	for _, tc := range []struct{ name, toml, want string }{
		{"depth", base + "x = {a = {b = {c = {d = {e = {f = {g = {h = 1}}}}}}}}\n", "app.toml: line 3: nested 9 levels deep, above the limit of 8"},
		{"depth of a header", base + "[a.b.c.d]\ne.f.g.h = 1\n[a.b.c.d.e.f.g.h.i]\n", "app.toml: line 5: nested 9 levels deep, above the limit of 8"},
		{"depth of arrays", base + "\nx = [[[[[[[[\n1]]]]]]]]\n", "app.toml: line 5: nested 9 levels deep, above the limit of 8"},
		{"array", base + "command = [" + strings.Repeat("\"a\",\n", MaxArrayLen) + "\"a\"]\n", "app.toml: line 1027: an array of more than 1024 elements (the limit)"},
		{"keys", base + "[env]\n" + distinctKeys(MaxKeys * 9)[:0] + strings.Repeat("A = 1\n", MaxKeys), "app.toml: line 2049: more than 2048 keys in the file (the limit)"},
		{"string", base + "x = '''" + strings.Repeat("a", MaxStringLen+1) + "'''", "app.toml: line 3: a string of 65537 bytes, above the limit of 65536"},
		{"key path", base + "[env]\n" + strings.Repeat("k", 253) + " = 1\n", "app.toml: line 4: a key path of 257 bytes, above the limit of 256"},
		{"lines", base + strings.Repeat("\n", MaxLines), "app.toml: line 16385: more than 16384 lines (the limit)"},
		{"size", base + strings.Repeat("#", MaxFileSize), "app.toml: manifest: 262173 bytes, above the limit of 256Ki"},
	} {
		_, err := Parse([]byte(tc.toml), "app.toml")
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: error %v\n want %s", tc.name, err, tc.want)
		}
	}
}

// The pre-scan measures valid TOML as the parser builds it: the depth,
// the longest array, string and key path it finds are the decoded tree's.
func TestScanMeasuresLikeParser(t *testing.T) {
	for _, doc := range []string{
		readmeExample(t),
		"a.b.c = 1\n",
		"[a.b]\nc = [1, [2, [3]], {d = {e = 'x'}}]\n",
		"[[a.b]]\nc = 1\n[[a.b]]\n\"q.r\".'s' = \"\"\"\n]]]}}}\"\n\"\"\"\n",
		"x = [ # [[[\n  1,\n  2, # ]\n]\ny = '''{{'''''\nz = \"\\\"[\"\n",
		"t = 1979-05-27 07:32:00Z\nu = [1979-05-27 07:32:00Z, 1.5e3, +inf]\n",
		"a = {}\nb = []\nc = [[], [[]]]\n",
		"[ a . \"b\" . c ]\nd = 1\n",
		"a = \"\"\"\\\n  x\"\"\"\nb = \"\"\n",
	} {
		st, err := scanLimits([]byte(doc))
		if err != nil {
			t.Errorf("%q: %v", doc, err)
			continue
		}
		want, err := treeStats([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		// Escapes make a string's text longer than its value; the depth
		// of arrays of tables is an upper bound.
		if !sameDepth(doc, st.depth, want.depth) || st.elems != want.elems || st.str < want.str {
			t.Errorf("%q: scan measured depth %d, array %d, string %d; the parser's tree has %d, %d, %d",
				doc, st.depth, st.elems, st.str, want.depth, want.elems, want.str)
		}
	}
}

// sameDepth: the scan's depth is the tree's, or an upper bound of it (at
// most twice) when the file has an array of tables.
func sameDepth(doc string, scan, tree int) bool {
	if strings.Contains(doc, "[[") {
		return tree <= scan && scan <= 2*tree
	}
	return scan == tree
}

// FuzzScanLimits checks the pre-scan against the TOML parser: on any file
// the parser accepts, the scan measures the decoded tree's depth and
// longest array, and no less than its longest string.
func FuzzScanLimits(f *testing.F) {
	for _, s := range []string{
		"a.b.c = 1\n",
		"[a.b]\nc = [1, [2, [3]], {d = {e = 'x'}}]\n",
		"[[a.b]]\nc = 1\n[a.b.d]\ne = 1\n",
		"x = [ # [[[\n  1,\n  2, # ]\n]\ny = '''{{'''''\nz = \"\\\"[\"\n",
		"t = 1979-05-27 07:32:00Z\nu = [1979-05-27 07:32:00Z, 1.5e3, +inf]\n",
		"a = \"\"\"\\\n  x\"\"\"\"\"\nb = \"\"\n",
		"[ a . \"b\" . c ]\nd = {e.f = 1, g = [[]]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		st, err := scanLimits(doc)
		want, terr := treeStats(doc)
		if terr != nil {
			return
		}
		if err != nil {
			if want.depth <= MaxDepth/2 && want.elems <= MaxArrayLen && want.str <= MaxStringLen && len(doc) < 4096 && bytes.Count(doc, []byte("=")) < MaxKeys/2 {
				t.Fatalf("%q: refused (%v), but its tree has depth %d, array %d, string %d", doc, err, want.depth, want.elems, want.str)
			}
			return
		}
		if !sameDepth(string(doc), st.depth, want.depth) || st.elems != want.elems || st.str < want.str {
			t.Fatalf("%q: scan measured depth %d, array %d, string %d; the parser's tree has %d, %d, %d",
				doc, st.depth, st.elems, st.str, want.depth, want.elems, want.str)
		}
	})
}

// Every manifest of the example apps and of the tests' data passes the
// pre-scan.
func TestLimitsKeepValidManifests(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*/shoal.toml")
	more, _ := filepath.Glob("../../examples/*/*.toml")
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatal("no example manifests found")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkLimits(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// BenchmarkParseAdversarial is the CPU time to refuse each adversarial
// manifest.
func BenchmarkParseAdversarial(b *testing.B) {
	for _, tc := range adversarial() {
		b.Run(strings.ReplaceAll(tc.name, " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			cpu0 := cpuTime(b)
			for b.Loop() {
				if _, err := Parse(tc.data, "app.toml"); err == nil {
					b.Fatal("accepted")
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// treeStats measures a decoded TOML document: the depth of its deepest
// node, its longest array and string value.
func treeStats(doc []byte) (scanStats, error) {
	var m map[string]any
	if err := toml.Unmarshal(doc, &m); err != nil {
		return scanStats{}, err
	}
	var st scanStats
	var walk func(v any, d int)
	walk = func(v any, d int) {
		st.depth = max(st.depth, d)
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				walk(e, d+1)
			}
		case []map[string]any: // [[headers]], bounded by MaxKeys
			for _, e := range v {
				walk(e, d+1)
			}
		case []any:
			st.elems = max(st.elems, len(v))
			for _, e := range v {
				walk(e, d+1)
			}
		case string:
			st.str = max(st.str, len(v))
		}
	}
	walk(m, 0)
	return st, nil
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
