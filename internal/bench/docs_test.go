package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteDocsOrdersSuites(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []string{"zeta", "jobs", "lifecycle"} {
		if err := WriteDocs(dir, s, "## "+s+"\n", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteDocs(dir, "lifecycle", "## lifecycle again\n", map[string][]byte{"a.svg": []byte("<svg/>")}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i, j, k := strings.Index(text, "## lifecycle again"), strings.Index(text, "## jobs"), strings.Index(text, "## zeta")
	if i < 0 || j < 0 || k < 0 || !(i < j && j < k) || !strings.HasPrefix(text, "# Benchmarks") {
		t.Fatalf("sections out of order or missing:\n%s", text)
	}
	if strings.Contains(text, "## lifecycle\n") {
		t.Error("old lifecycle section kept")
	}
	if _, err := os.Stat(filepath.Join(dir, "a.svg")); err != nil {
		t.Error(err)
	}
}

func TestWriteDocsRefusesBadNames(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []string{"", "../x", ".hidden", "a/b"} {
		if err := WriteDocs(dir, s, "x", nil); err == nil {
			t.Errorf("suite %q accepted", s)
		}
	}
	if err := WriteDocs(dir, "ok", "x", map[string][]byte{"../evil.svg": nil}); err == nil {
		t.Error("chart name with a folder accepted")
	}
	if _, err := os.Stat(filepath.Join(dir, "bench", "ok.md")); !os.IsNotExist(err) {
		t.Error("a refused write left a section behind")
	}
}
