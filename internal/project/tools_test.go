package project

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// tool says where a program the Go sources run comes from: a Debian package
// (pkg), or, with pkg empty, what else provides it (other).
type tool struct {
	pkg   string
	other string
}

// projectBuilt is the other of the programs this project builds itself.
const projectBuilt = "built by this project (make build examples, or the test that runs it)"

// hostTools maps every program that the Go sources hand to exec.Command,
// exec.CommandContext, exec.LookPath or one of the project's wrappers of
// them (a literal name, or the base name of a literal path; the first word
// of each command of a literal `sh -c` script) to where it comes from. A
// program's Debian package must be in the test set of
// scripts/install-deps.sh unless the package is Essential (every Debian
// system has it): `make test` runs on a freshly installed machine, and the
// benchmark suites' quick tests under internal/bench run their tools too.
var hostTools = map[string]tool{
	// Essential packages.
	"cp":      {pkg: "coreutils"},
	"dd":      {pkg: "coreutils"},
	"sleep":   {pkg: "coreutils"},
	"true":    {pkg: "coreutils"},
	"echo":    {pkg: "coreutils"},
	"cat":     {pkg: "coreutils"},
	"sh":      {pkg: "dash"},
	"gzip":    {pkg: "gzip"},
	"tar":     {pkg: "tar"},
	"ldd":     {pkg: "libc-bin"},
	"nsenter": {pkg: "util-linux"},
	"setpriv": {pkg: "util-linux"},

	// What the daemon runs, and the tests with it.
	"cc":            {pkg: "gcc"},
	"runc":          {pkg: "runc"},
	"crun":          {pkg: "crun"},
	"busybox":       {pkg: "busybox-static"},
	"iptables":      {pkg: "iptables"},
	"iptables-save": {pkg: "iptables"},
	"ip":            {pkg: "iproute2"},
	"mkfs.ext4":     {pkg: "e2fsprogs"},
	"modprobe":      {pkg: "kmod"},

	// What only tests run (and `make bench`, whose set holds the test set).
	"systemd-analyze":    {pkg: "systemd"},
	"etcd":               {pkg: "etcd-server"},
	"nft":                {pkg: "nftables"},
	"docker-registry":    {pkg: "docker-registry"},
	"skopeo":             {pkg: "skopeo"},
	"umoci":              {pkg: "umoci"},
	"mmdebstrap":         {pkg: "mmdebstrap"},
	"podman":             {pkg: "podman"},
	"chromium":           {pkg: "chromium"},
	"ab":                 {pkg: "apache2-utils"},
	"wrk":                {pkg: "wrk"},
	"h2load":             {pkg: "nghttp2-client"},
	"nginx":              {pkg: "nginx"},
	"caddy":              {pkg: "caddy"},
	"curl":               {pkg: "curl"},
	"sqlite3":            {pkg: "sqlite3"},
	"mariadb":            {pkg: "mariadb-client"},
	"sysbench":           {pkg: "sysbench"},
	"xz":                 {pkg: "xz-utils"},
	"criu":               {other: "scripts/install-deps.sh builds CRIU 4.2.1 from Debian's source package into /usr/local/lib/shoal/criu unless the host's own is 4.2 or later and passes criu check"},
	"qemu-system-x86_64": {other: "optional: the host suite only notes whether a VM baseline could run; no test needs it"},

	"shoal":       {other: projectBuilt},
	"shoal-bench": {other: projectBuilt},
	"shoal-init":  {other: projectBuilt},
	"hello":       {other: projectBuilt},
	"slowboot":    {other: projectBuilt},
	"cpuburn":     {other: projectBuilt},
	"selfscale":   {other: projectBuilt},

	"go": {other: "the Go toolchain, which scripts/install-deps.sh installs from the Go module proxy when missing"},
}

// essentialPkgs are Debian 12's Essential packages among hostTools' (every
// installed system has them, so install-deps.sh need not name them).
var essentialPkgs = map[string]bool{
	"coreutils": true, "dash": true, "gzip": true, "tar": true, "libc-bin": true, "util-linux": true,
}

// TestTestToolsAreInstalled finds every program the Go sources run and
// checks it against hostTools and the test set of scripts/install-deps.sh,
// so that `make test` installs everything a test executes.
func TestTestToolsAreInstalled(t *testing.T) {
	root := moduleRoot(t)
	testPkgs := installSet(t, filepath.Join(root, "scripts", "install-deps.sh"), "test")
	uses := findPrograms(t, root)
	if len(uses) < 10 {
		t.Fatalf("found only %d programs run by the sources under %s: the scan is broken", len(uses), root)
	}
	names := make([]string, 0, len(uses))
	for name := range uses {
		names = append(names, name)
	}
	sort.Strings(names)
	t.Logf("programs the sources run: %s", strings.Join(names, " "))
	for _, name := range names {
		where := uses[name]
		at := strings.Join(where[:min(len(where), 3)], ", ")
		if len(where) > 3 {
			at += fmt.Sprintf(" and %d more", len(where)-3)
		}
		tl, ok := hostTools[name]
		switch {
		case !ok:
			t.Errorf("%s runs %q, which internal/project/tools_test.go's hostTools does not know: add "+
				"%q: {pkg: \"<Debian package>\"} there (find the package with `dpkg -S $(command -v %s)` or "+
				"`apt-file search bin/%s`), and add the package to test_pkgs in scripts/install-deps.sh "+
				"(unless it is Essential); for a program this project builds use {other: projectBuilt}",
				at, name, name, name, name)
		case tl.pkg == "" && tl.other == "":
			t.Errorf("hostTools[%q] names neither a package nor another source", name)
		case tl.pkg != "" && !essentialPkgs[tl.pkg] && !testPkgs[tl.pkg]:
			t.Errorf("%s runs %q, from the Debian package %s, which `scripts/install-deps.sh test` does not install: "+
				"add %s to test_pkgs in scripts/install-deps.sh (make test runs on a fresh machine)",
				at, name, tl.pkg, tl.pkg)
		}
	}
	for name, tl := range hostTools {
		if _, ok := uses[name]; !ok && tl.other != projectBuilt {
			t.Errorf("hostTools[%q] in internal/project/tools_test.go: no source runs %s any more; remove the entry "+
				"(and its package from test_pkgs in scripts/install-deps.sh if nothing else needs it)", name, name)
		}
	}
}

// TestProgramScan checks the scanner on a small package: direct calls,
// wrappers (a parameter, an element of a variadic parameter, the first of a
// slice), constants, assignments and sh -c scripts.
func TestProgramScan(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "a")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	src := `package a

import (
	"context"
	"os"
	"os/exec"
)

const reg = "/usr/bin/regbin"

func run(ctx context.Context, name string, args ...string) error {
	return exec.CommandContext(ctx, name, args...).Run()
}

func need(tools ...string) {
	for _, tool := range tools {
		exec.LookPath(tool)
	}
}

func first(args ...string) { exec.Command(args[0], args[1:]...).Run() }

func indirect(prog string) { run(context.Background(), prog) }

func f() {
	exec.Command("alpha", "x").Run()
	run(context.Background(), "beta")
	need("gamma", "delta")
	first("epsilon", "-x")
	indirect("zeta")
	exec.Command(reg).Run()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "eta"
	}
	exec.Command(cc).Run()
	exec.Command("/bin/sh", "-c", "read x; theta -a | iota && X=1 kappa $(lambda) >/dev/null; while :; do exec mu; done").Run()
	for _, p := range []string{"nu", "xi"} {
		exec.LookPath(p)
	}
	exec.Command(os.Args[0]).Run()
	first := func(args ...string) { exec.Command("omicron", args...).Run() }
	first("not-a-program", "x")
}
`
	if err := os.WriteFile(filepath.Join(sub, "a.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := findPrograms(t, dir)
	want := []string{"alpha", "beta", "delta", "epsilon", "eta", "gamma", "iota", "kappa", "lambda", "mu", "nu", "omicron", "regbin", "sh", "theta", "xi", "zeta"}
	var names []string
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("found %v; want %v", names, want)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s: %v", root, err)
	}
	return root
}

// installSet reads the packages of one set (run, test, bench) from
// install-deps.sh's NAME_pkgs="..." lines, expanding $OTHER_pkgs.
func installSet(t *testing.T, script, set string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string][]string{}
	re := regexp.MustCompile(`(?m)^([a-z]+)_pkgs="([^"]*)"`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		var pkgs []string
		for _, w := range strings.Fields(m[2]) {
			if ref, ok := strings.CutPrefix(w, "$"); ok {
				inner, ok := sets[strings.TrimSuffix(strings.Trim(ref, "{}"), "_pkgs")]
				if !ok {
					t.Fatalf("%s: %s_pkgs refers to %s, not set before it", script, m[1], w)
				}
				pkgs = append(pkgs, inner...)
				continue
			}
			pkgs = append(pkgs, w)
		}
		sets[m[1]] = pkgs
	}
	if len(sets[set]) == 0 {
		t.Fatalf("%s: no %s_pkgs=\"...\" line", script, set)
	}
	out := map[string]bool{}
	for _, p := range sets[set] {
		out[p] = true
	}
	return out
}

// findPrograms returns each program the Go sources under root run, with
// the places that run it.
func findPrograms(t *testing.T, root string) map[string][]string {
	t.Helper()
	modPath := ""
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil {
		if m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(b); m != nil {
			modPath = string(m[1])
		}
	}
	s := &scan{fset: token.NewFileSet(), funcs: map[string]*funcInfo{}, consts: map[string]map[string]string{}, uses: map[string][]string{}, root: root}
	var files []*fileInfo
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// testdata and the example apps hold programs that run inside
		// containers, not on the host.
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin" ||
			(filepath.Dir(p) == root && d.Name() == "examples")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(s.fset, p, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		pkgPath := path.Join(modPath, filepath.ToSlash(rel))
		if strings.HasSuffix(p, "_test.go") && strings.HasSuffix(f.Name.Name, "_test") {
			pkgPath += "_test"
		}
		files = append(files, &fileInfo{f: f, pkg: pkgPath, imports: importNames(f)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range files {
		s.collectConsts(fi)
	}
	// Find the wrappers until no new one appears: a function that hands
	// its parameter to exec or to another wrapper is one.
	for range 10 {
		before := s.wrapperCount()
		for _, fi := range files {
			s.walk(fi, false)
		}
		if s.wrapperCount() == before {
			break
		}
	}
	for _, fi := range files {
		s.walk(fi, true)
	}
	return s.uses
}

type fileInfo struct {
	f       *ast.File
	pkg     string
	imports map[string]string // local name → import path
}

// funcInfo is a wrapper: the parameters it runs as a program.
type funcInfo struct {
	params map[int]paramUse
}

// paramUse is how a wrapper uses a parameter as a program: itself (whole),
// every element of it (each: a variadic parameter ranged over), or its
// first element (first: args[0]).
type paramUse int

const (
	whole paramUse = iota + 1
	each
	first
)

type scan struct {
	fset   *token.FileSet
	root   string
	funcs  map[string]*funcInfo
	consts map[string]map[string]string // package → name → string value
	uses   map[string][]string
}

func (s *scan) wrapperCount() int {
	n := 0
	for _, f := range s.funcs {
		n += len(f.params)
	}
	return n
}

func importNames(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := path.Base(p)
		if im.Name != nil {
			name = im.Name.Name
		}
		m[name] = p
	}
	return m
}

func (s *scan) collectConsts(fi *fileInfo) {
	pkg := strings.TrimSuffix(fi.pkg, "_test")
	for _, d := range fi.f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
			continue
		}
		for _, sp := range gd.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					if v, ok := stringLit(vs.Values[i]); ok {
						if s.consts[pkg] == nil {
							s.consts[pkg] = map[string]string{}
						}
						s.consts[pkg][n.Name] = v
					}
				}
			}
		}
	}
}

func stringLit(e ast.Expr) (string, bool) {
	if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
		v, err := strconv.Unquote(bl.Value)
		return v, err == nil
	}
	return "", false
}

// funcKey names a function or method by its package and name (methods of
// one package by name alone: calls are matched without types).
func funcKey(pkg, name string) string { return strings.TrimSuffix(pkg, "_test") + "." + name }

// walk visits every call in fi. With record, it records the programs; without,
// it finds wrappers.
func (s *scan) walk(fi *fileInfo, record bool) {
	for _, d := range fi.f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		params := map[*ast.Object]int{}
		variadic := map[*ast.Object]bool{}
		i := 0
		for _, fl := range fd.Type.Params.List {
			_, isVar := fl.Type.(*ast.Ellipsis)
			for _, n := range fl.Names {
				params[n.Obj] = i
				variadic[n.Obj] = isVar
				i++
			}
			if len(fl.Names) == 0 {
				i++
			}
		}
		fc := &funcCtx{s: s, fi: fi, body: fd.Body, params: params, key: funcKey(fi.pkg, fd.Name.Name)}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			for _, prog := range fc.programsOf(call) {
				fc.use(prog, call, record)
			}
			return true
		})
	}
}

type funcCtx struct {
	s      *scan
	fi     *fileInfo
	body   *ast.BlockStmt
	params map[*ast.Object]int
	key    string
}

// progArg is one expression a call runs as a program, and how.
type progArg struct {
	e    ast.Expr
	use  paramUse // whole: e is the program; first: e's first element
	argv []ast.Expr
}

// programsOf returns the program expressions call runs: exec's, or those
// of a known wrapper.
func (fc *funcCtx) programsOf(call *ast.CallExpr) []progArg {
	var key string
	switch fn := call.Fun.(type) {
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok && x.Obj == nil {
			if p, ok := fc.fi.imports[x.Name]; ok {
				if p == "os/exec" {
					switch fn.Sel.Name {
					case "Command", "LookPath":
						if len(call.Args) > 0 {
							return []progArg{{e: call.Args[0], use: whole, argv: call.Args}}
						}
					case "CommandContext":
						if len(call.Args) > 1 {
							return []progArg{{e: call.Args[1], use: whole, argv: call.Args[1:]}}
						}
					}
					return nil
				}
				key = funcKey(p, fn.Sel.Name)
				break
			}
		}
		key = funcKey(fc.fi.pkg, fn.Sel.Name)
	case *ast.Ident:
		if fn.Obj != nil && fn.Obj.Kind == ast.Var {
			return nil // a local func value, not the package's function of that name
		}
		key = funcKey(fc.fi.pkg, fn.Name)
	default:
		return nil
	}
	w := fc.s.funcs[key]
	if w == nil {
		return nil
	}
	var out []progArg
	for i, u := range w.params {
		if i >= len(call.Args) {
			continue
		}
		switch u {
		case whole:
			out = append(out, progArg{e: call.Args[i], use: whole, argv: call.Args[i:]})
		case each:
			if call.Ellipsis.IsValid() {
				out = append(out, progArg{e: call.Args[i], use: each})
				continue
			}
			for _, a := range call.Args[i:] {
				out = append(out, progArg{e: a, use: whole})
			}
		case first:
			if call.Ellipsis.IsValid() {
				out = append(out, progArg{e: call.Args[i], use: first})
			} else {
				out = append(out, progArg{e: call.Args[i], use: whole, argv: call.Args[i:]})
			}
		}
	}
	return out
}

// use records the program(s) of a, or marks the enclosing function as a
// wrapper when a comes from its parameter.
func (fc *funcCtx) use(a progArg, call *ast.CallExpr, record bool) {
	e := ast.Unparen(a.e)
	if a.use == first || a.use == each {
		if cl, ok := e.(*ast.CompositeLit); ok {
			for i, el := range cl.Elts {
				if a.use == first && i > 0 {
					break
				}
				fc.use(progArg{e: el, use: whole, argv: cl.Elts[i:]}, call, record)
			}
			return
		}
		if id, ok := e.(*ast.Ident); ok {
			if i, ok := fc.params[id.Obj]; ok && !record {
				fc.markWrapper(i, a.use)
			}
		}
		return
	}
	for _, v := range fc.values(e, record) {
		name := path.Base(v)
		if record {
			pos := fc.s.fset.Position(call.Pos())
			rel, _ := filepath.Rel(fc.s.root, pos.Filename)
			fc.s.uses[name] = append(fc.s.uses[name], fmt.Sprintf("%s:%d", rel, pos.Line))
			if (name == "sh" || name == "bash") && len(a.argv) > 2 {
				if flag, ok := stringLit(a.argv[1]); ok && flag == "-c" {
					for _, lit := range literalsIn(a.argv[2]) {
						for _, w := range scriptCommands(lit) {
							fc.s.uses[w] = append(fc.s.uses[w], fmt.Sprintf("%s:%d (sh -c)", rel, pos.Line))
						}
					}
				}
			}
		}
	}
}

func (fc *funcCtx) markWrapper(i int, u paramUse) {
	w := fc.s.funcs[fc.key]
	if w == nil {
		w = &funcInfo{params: map[int]paramUse{}}
		fc.s.funcs[fc.key] = w
	}
	w.params[i] = u
}

// values returns the literal strings e may hold: a literal, a constant, a
// variable assigned literals in this function, a range variable over a
// literal list. A parameter makes the function a wrapper instead.
func (fc *funcCtx) values(e ast.Expr, record bool) []string {
	if v, ok := stringLit(e); ok {
		return []string{v}
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			if lit, ok := x.Index.(*ast.BasicLit); ok && lit.Value == "0" {
				if i, ok := fc.params[id.Obj]; ok && !record {
					fc.markWrapper(i, first)
				}
			}
		}
		return nil
	case *ast.Ident:
		if x.Obj == nil {
			if v, ok := fc.s.consts[strings.TrimSuffix(fc.fi.pkg, "_test")][x.Name]; ok {
				return []string{v}
			}
			return nil
		}
		if i, ok := fc.params[x.Obj]; ok {
			if !record {
				fc.markWrapper(i, whole)
			}
			return nil
		}
		if x.Obj.Kind == ast.Con {
			if vs, ok := x.Obj.Decl.(*ast.ValueSpec); ok {
				for i, n := range vs.Names {
					if n.Obj == x.Obj && i < len(vs.Values) {
						if v, ok := stringLit(vs.Values[i]); ok {
							return []string{v}
						}
					}
				}
			}
			return nil
		}
		var out []string
		// A range variable: over a literal list, or over a variadic
		// parameter (then each element is a program).
		if as, ok := x.Obj.Decl.(*ast.AssignStmt); ok && len(as.Rhs) == 1 {
			if ue, ok := as.Rhs[0].(*ast.UnaryExpr); ok && ue.Op == token.RANGE {
				switch r := ast.Unparen(ue.X).(type) {
				case *ast.CompositeLit:
					for _, el := range r.Elts {
						if v, ok := stringLit(el); ok {
							out = append(out, v)
						}
					}
				case *ast.Ident:
					if i, ok := fc.params[r.Obj]; ok && !record {
						fc.markWrapper(i, each)
					}
				}
				return out
			}
		}
		// Every literal assigned to the variable in this function.
		ast.Inspect(fc.body, func(n ast.Node) bool {
			switch st := n.(type) {
			case *ast.AssignStmt:
				for i, l := range st.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Obj == x.Obj && i < len(st.Rhs) && len(st.Lhs) == len(st.Rhs) {
						if v, ok := stringLit(st.Rhs[i]); ok {
							out = append(out, v)
						}
					}
				}
			case *ast.ValueSpec:
				for i, id := range st.Names {
					if id.Obj == x.Obj && i < len(st.Values) {
						if v, ok := stringLit(st.Values[i]); ok {
							out = append(out, v)
						}
					}
				}
			}
			return true
		})
		return out
	}
	return nil
}

// literalsIn returns the string literals of a script expression: a
// literal, a concatenation, or fmt.Sprintf's format.
func literalsIn(e ast.Expr) []string {
	switch x := ast.Unparen(e).(type) {
	case *ast.BasicLit:
		if v, ok := stringLit(x); ok {
			return []string{v}
		}
	case *ast.BinaryExpr:
		if x.Op == token.ADD {
			// The pieces of a concatenation are not whole commands: join
			// the literal ones.
			return []string{strings.Join(append(literalsIn(x.X), literalsIn(x.Y)...), " ")}
		}
	case *ast.CallExpr:
		if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(x.Args) > 0 {
			return literalsIn(x.Args[0])
		}
	}
	return nil
}

// shellWords are the shell's keywords and the builtins of dash that
// scripts here use: not programs.
var shellWords = map[string]bool{
	"done": true, "for": true, "in": true, "fi": true, "case": true, "esac": true, "read": true, "wait": true, "exit": true,
	"cd": true, "set": true, "export": true, "trap": true, ":": true, ".": true, "eval": true, "echo": true,
	"printf": true, "test": true, "[": true, "true": true, "false": true, "kill": true, "ulimit": true,
	"umask": true, "shift": true, "return": true, "local": true, "}": true,
}

// shellPrefixes come before a command's program: keywords and exec.
var shellPrefixes = map[string]bool{
	"while": true, "until": true, "do": true, "if": true, "then": true, "else": true, "elif": true,
	"{": true, "!": true, "exec": true,
}

var scriptSplit = regexp.MustCompile("&&|\\|\\||[;|&\n(`]|\\$\\(")

// scriptCommands returns the programs a shell script runs: the first word
// of each command, after variable assignments and exec.
func scriptCommands(script string) []string {
	var out []string
	for _, cmd := range scriptSplit.Split(script, -1) {
		for _, w := range strings.Fields(cmd) {
			w = strings.TrimRight(w, ")")
			if strings.Contains(w, "=") && !strings.HasPrefix(w, "=") || shellPrefixes[w] {
				continue
			}
			if shellWords[w] || strings.ContainsAny(w, "$%<>'\"") || strings.HasPrefix(w, "-") || w == "" {
				break
			}
			out = append(out, path.Base(w))
			break
		}
	}
	return out
}
