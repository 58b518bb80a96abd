package project

import (
	"bufio"
	"errors"
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestPartsTableMatchesImports holds DESIGN.md's parts table to the code, in
// the manner of Tailscale's deptest: every package under internal/ has a row,
// every row names packages that exist, and a row's imports column lists
// exactly the internal packages its packages import (non-test files). The
// column's text before a ';' is that list (notes in parentheses are ignored);
// what follows the ';' names outside libraries and is not checked.
func TestPartsTableMatchesImports(t *testing.T) {
	root, pkgs := repoImports(t)
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages under %s/internal", len(pkgs), root)
	}
	rows, err := partsTable(filepath.Join(root, "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		for _, p := range r.parts {
			if seen[p] {
				t.Errorf("DESIGN.md:%d: package %s has a second row in the parts table: keep one", r.line, p)
			}
			seen[p] = true
			imports, ok := pkgs[p]
			if !ok {
				t.Errorf("DESIGN.md:%d: the parts table's row %q names %s, but internal/%s holds no Go package: "+
					"rename it to the package's path under internal/ or remove it from the row", r.line, r.part, p, p)
				continue
			}
			listed := map[string]bool{}
			for _, i := range r.imports {
				listed[i] = true
			}
			var missing []string
			for _, i := range imports {
				if !listed[i] {
					missing = append(missing, i)
				}
			}
			var extra []string
			used := map[string]bool{}
			for _, i := range imports {
				used[i] = true
			}
			if len(r.parts) == 1 {
				for _, i := range r.imports {
					if !used[i] {
						extra = append(extra, i)
					}
				}
			}
			if len(missing) > 0 {
				t.Errorf("DESIGN.md:%d: internal/%s imports %s, which its row %q in the parts table does not list: "+
					"add it to the row's imports column (before any ';'), or drop the import",
					r.line, p, strings.Join(missing, ", "), r.part)
			}
			if len(extra) > 0 {
				t.Errorf("DESIGN.md:%d: the parts table's row %q lists %s, which internal/%s does not import: "+
					"remove it from the row's imports column", r.line, r.part, strings.Join(extra, ", "), p)
			}
			if len(missing)+len(extra) > 0 && len(r.parts) == 1 {
				t.Errorf("DESIGN.md:%d: the imports column of row %q should begin: %s", r.line, r.part, importsCell(imports))
			}
		}
	}
	// Rows naming several packages bound each; every listed import must be
	// used by one of them.
	for _, r := range rows {
		if len(r.parts) < 2 {
			continue
		}
		used := map[string]bool{}
		for _, p := range r.parts {
			for _, i := range pkgs[p] {
				used[i] = true
			}
		}
		for _, i := range r.imports {
			if !used[i] {
				t.Errorf("DESIGN.md:%d: the parts table's row %q lists %s, which none of its packages imports: "+
					"remove it from the row's imports column", r.line, r.part, i)
			}
		}
	}
	var unlisted []string
	for p := range pkgs {
		if !seen[p] {
			unlisted = append(unlisted, p)
		}
	}
	sort.Strings(unlisted)
	for _, p := range unlisted {
		t.Errorf("internal/%s has no row in DESIGN.md's parts table (## Parts): add the row\n\t| %s | <what it does> | %s |",
			p, p, importsCell(pkgs[p]))
	}
}

// importsCell is the text of an imports column listing imports.
func importsCell(imports []string) string {
	if len(imports) == 0 {
		return "—"
	}
	return strings.Join(imports, ", ")
}

// modulePath reads the module path from go.mod.
func modulePath(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// internalImports maps every package under root/internal, by its path below
// internal/, to the sorted internal packages its non-test files import.
func internalImports(root, prefix string) (map[string][]string, error) {
	pkgs := map[string][]string{}
	base := filepath.Join(root, "internal")
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != base && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		bp, err := build.Default.ImportDir(p, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("package in %s: %w", p, err)
		}
		rel, _ := filepath.Rel(base, p)
		imports := []string{}
		for _, i := range bp.Imports {
			if strings.HasPrefix(i, prefix) {
				imports = append(imports, strings.TrimPrefix(i, prefix))
			}
		}
		sort.Strings(imports)
		pkgs[filepath.ToSlash(rel)] = imports
		return nil
	})
	return pkgs, err
}

// partRow is one row of DESIGN.md's parts table.
type partRow struct {
	line    int
	part    string   // the first cell as written
	parts   []string // the packages it names, paths below internal/
	imports []string // the internal packages its imports column lists
}

var pkgPath = regexp.MustCompile(`^[a-z0-9][a-z0-9_/-]*$`)

// partsTable reads the table under DESIGN.md's "## Parts" heading: the first
// column names packages (comma-separated paths below internal/), the column
// headed "imports" the internal packages they import.
func partsTable(design string) ([]partRow, error) {
	f, err := os.Open(design)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		rows      []partRow
		inSection bool
		importsAt = -1
		n         int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			if inSection && strings.HasPrefix(l, "## ") {
				break
			}
			inSection = strings.HasPrefix(l, "## Parts")
			continue
		}
		if !inSection || !strings.HasPrefix(l, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if importsAt < 0 {
			for i, c := range cells {
				if strings.HasPrefix(strings.ToLower(c), "imports") {
					importsAt = i
				}
			}
			if importsAt < 0 {
				return nil, fmt.Errorf("%s:%d: the parts table's header has no column headed \"imports\"", design, n)
			}
			continue
		}
		if strings.Trim(cells[0], "-: ") == "" {
			continue // the header's rule
		}
		if len(cells) <= importsAt {
			return nil, fmt.Errorf("%s:%d: the parts table's row has %d cells, the header %d", design, n, len(cells), importsAt+1)
		}
		r := partRow{line: n, part: cells[0]}
		for _, p := range strings.Split(strings.ReplaceAll(cells[0], "`", ""), ",") {
			p = strings.TrimSpace(p)
			if !pkgPath.MatchString(p) {
				return nil, fmt.Errorf("%s:%d: the parts table's first column names %q, not a package path below internal/", design, n, p)
			}
			r.parts = append(r.parts, p)
		}
		cell, _, _ := strings.Cut(withoutParens(cells[importsAt]), ";")
		cell = strings.ReplaceAll(cell, "`", "")
		for _, i := range strings.Split(cell, ",") {
			i = strings.TrimSpace(i)
			if i == "" || i == "—" || i == "-" {
				continue
			}
			if !pkgPath.MatchString(i) {
				return nil, fmt.Errorf("%s:%d: the imports column names %q, not a package path below internal/ "+
					"(outside libraries go after a ';', notes in parentheses)", design, n, i)
			}
			r.imports = append(r.imports, i)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no parts table under a heading \"## Parts\"", design)
	}
	return rows, nil
}

// withoutParens drops the text in parentheses, nested or not.
func withoutParens(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// repoImports is the repository's root and the internal packages each
// internal package imports (non-test files).
func repoImports(t *testing.T) (root string, pkgs map[string][]string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if pkgs, err = internalImports(root, module+"/internal/"); err != nil {
		t.Fatal(err)
	}
	return root, pkgs
}
