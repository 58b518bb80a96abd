package stateful

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
	"github.com/shoal-run/shoal/internal/manifest"
)

// The suite's failover itself (examples/galera/shoal.toml deployed, three
// synced members, sysbench and a writer through the proxy's TCP route, a
// member's mariadbd killed, the cluster whole again, no committed row
// lost) is internal/e2e's TestGaleraCluster; `make bench` and `make
// bench-quick` run the suite whole. Its tests here check the rest of its
// harness without a second Galera cluster.

// TestGaleraManifest: the example still has what the suite rewrites, and
// the rewrite is a valid manifest with the suite's image, port and
// password, and no secret.
func TestGaleraManifest(t *testing.T) {
	root, err := bench.SourceTree()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "examples", "galera", "shoal.toml"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := galeraManifest(string(raw), "galera:bench", 23306)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := manifest.Parse([]byte(text), "galera.toml")
	if err != nil {
		t.Fatalf("the suite's manifest: %v\n%s", err, text)
	}
	if cfg.Image != "galera:bench" || cfg.Listen != 23306 || cfg.Env["MARIADB_PASSWORD"] != password ||
		cfg.Env["MARIADB_PASSWORD_FILE"] != "" || len(cfg.Secrets) != 0 {
		t.Errorf("the suite's manifest: image %q, listen %d, env %v, secrets %v", cfg.Image, cfg.Listen, cfg.Env, cfg.Secrets)
	}
	if _, err := galeraManifest("name = \"galera\"\n", "galera:bench", 23306); err == nil {
		t.Error("a manifest without the image line was rewritten")
	}
}

// TestSysbenchSummary: the counts of sysbench 1.0.20's summary are read;
// a run that ended without one (a crash in its reconnect) has none.
func TestSysbenchSummary(t *testing.T) {
	out := `SQL statistics:
    queries performed:
        read:                            14014
        write:                           4004
        other:                           2002
        total:                           20020
    transactions:                        1001   (99.71 per sec.)
    queries:                             20020  (1994.29 per sec.)
    ignored errors:                      7      (0.70 per sec.)
    reconnects:                          2      (0.20 per sec.)
`
	if n := sbCount(out, "transactions"); n != 1001 {
		t.Errorf("transactions: %d, want 1001", n)
	}
	if n := sbCount(out, "ignored errors"); n != 7 {
		t.Errorf("ignored errors: %d, want 7", n)
	}
	if n := sbCount("FATAL: mysql_drv_query() returned error 2013 (Lost connection to server during query)\n", "transactions"); n != -1 {
		t.Errorf("transactions of a run without a summary: %d, want -1", n)
	}
}

// TestQuick renders the suite's section from the figures of a quick run
// (one failover, of galera-0) and checks it as every suite's quick run is
// checked: the time to 3 synced members and the failed transactions have
// numbers, and the section has its heading, machine and command.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("stateful")
	o, err := bench.Options{Quick: true}.WithDefaults(s.Name)
	if err != nil {
		t.Fatal(err)
	}
	rep := bench.NewReport(context.Background(), s.Name, s.Title, o)
	e := &env{quick: true}
	rows := []bench.Row{{Name: rowRecover, Command: "kill -KILL", Values: []float64{41.5}}}
	sides := []runSide{{sbTxns: 1001, sbFailed: 7, sbCrashed: 1, wAttempts: 500, wFailed: 3, victim: "galera-0", rows: 497}}
	e.render(rep, rows, sides, 95*time.Second)
	benchtest.Section(t, s, rep, func(t *testing.T, rep *bench.Report, docs string) {
		benchtest.CheckTables(t, rep, map[string][]string{
			"Until 3 synced members again":            {rowRecover},
			"Failed transactions during the failover": {rowWriter, rowSB},
		})
		raw, err := os.ReadFile(filepath.Join(docs, "bench", s.Name+".md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"(497 in all)", "galera-0 killed: 1001 transactions, 7 ignored errors", "1 sysbench run(s)", strconv.Itoa(sbThreads) + " threads"} {
			if !strings.Contains(string(raw), want) {
				t.Errorf("the section does not say %q:\n%s", want, raw)
			}
		}
	})
}
