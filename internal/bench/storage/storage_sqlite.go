package storage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
	"github.com/shoal-run/shoal/internal/runtime"
)

// SQL of the SQLite measurements.
const (
	sqlRead = "SELECT count(*), sum(v) FROM t WHERE name LIKE '%ab%';"
	sqlCopy = "CREATE TABLE t2 AS SELECT * FROM t;"
)

// sqlite measures a full-scan query and a table copy on databases of
// growing size: in the image (overlay), in a bind volume, on the host.
func (e *storageEnv) sqlite(ctx context.Context, rep *bench.Report) error {
	type size struct {
		label string
		rows  int
	}
	sizes := []size{{"~150 kB", 1500}, {"~10 MB", 130000}, {"~100 MB", 1300000}}
	if e.o.Quick {
		sizes = []size{{"~150 kB", 1500}, {"~2 MB", 20000}}
	}
	runs := e.o.RunsOr(5, 2)
	var reads, copies []bench.Table
	for _, sz := range sizes {
		e.o.Logf("storage: preparing a %s database", sz.label)
		rootfs := filepath.Join(e.dir, "sqlite-rootfs")
		os.RemoveAll(rootfs)
		if out, err := exec.CommandContext(ctx, "cp", "-a", e.base, rootfs).CombinedOutput(); err != nil {
			return fmt.Errorf("storage: cp: %w: %s", err, out)
		}
		pristine := filepath.Join(rootfs, "db", "bench.db")
		os.MkdirAll(filepath.Dir(pristine), 0o755)
		gen := fmt.Sprintf("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL); "+
			"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < %d) "+
			"INSERT INTO t SELECT i, hex(randomblob(32)), abs(random() %% 1000) FROM c;", sz.rows)
		if _, err := kit.HostRun(ctx, "sqlite3", pristine, gen); err != nil {
			return fmt.Errorf("storage: make database: %w", err)
		}
		st, _ := os.Stat(pristine)
		layers, err := e.k.Image(ctx, rootfs, "shoal-bench/sqlite:"+strings.Trim(strings.ReplaceAll(sz.label, " ", ""), "~"))
		if err != nil {
			return err
		}
		work := filepath.Join(e.dir, "sqlite-work")
		os.MkdirAll(work, 0o755)
		fresh := func() error {
			out, err := exec.CommandContext(ctx, "cp", pristine, filepath.Join(work, "bench.db")).CombinedOutput()
			if err != nil {
				return fmt.Errorf("cp: %w: %s", err, out)
			}
			return nil
		}
		vol := []runtime.Mount{{Source: work, Destination: "/vol"}}
		subjects := func(flags []string, sql string) []bench.Subject {
			cmd := func(db string) []string {
				return append(append([]string{"bench-worker", "time", "sqlite3"}, flags...), db, sql)
			}
			show := func(db string) string {
				return strings.Join(append([]string{"shoal bench-worker time sqlite3"}, append(flags, db)...), " ") + ` "` + sql + `"`
			}
			return []bench.Subject{
				{Name: stHost, Command: show("DIR/bench.db") + " (fresh copy each run)", Run: func(ctx context.Context, _ int) (float64, error) {
					if err := fresh(); err != nil {
						return 0, err
					}
					out, err := kit.HostRun(ctx, e.o.ShoalBin, cmd(filepath.Join(work, "bench.db"))...)
					if err != nil {
						return 0, err
					}
					return parseMillis(out)
				}},
				{Name: stOverlay, Command: show("/db/bench.db") + " (in the image)", Run: func(ctx context.Context, _ int) (float64, error) {
					out, err := e.k.Run(ctx, runtime.Spec{Layers: layers, Args: append([]string{"/shoal"}, cmd("/db/bench.db")...)})
					if err != nil {
						return 0, err
					}
					return parseMillis(out)
				}},
				{Name: stVolume, Command: show("/vol/bench.db") + " (fresh copy each run)", Run: func(ctx context.Context, _ int) (float64, error) {
					if err := fresh(); err != nil {
						return 0, err
					}
					out, err := e.k.Run(ctx, runtime.Spec{Layers: layers, Args: append([]string{"/shoal"}, cmd("/vol/bench.db")...), Mounts: vol})
					if err != nil {
						return 0, err
					}
					return parseMillis(out)
				}},
			}
		}
		label := fmt.Sprintf("%s database (%.1f MB, %d rows)", sz.label, float64(st.Size())/1e6, sz.rows)
		rows, err := bench.Measure(ctx, e.o, 1, runs, subjects([]string{"-readonly"}, sqlRead))
		if err != nil {
			return err
		}
		reads = append(reads, bench.Table{Title: "Query, " + label, Unit: "ms", Baseline: stHost, Rows: rows,
			Note: "A full scan, opened read-only (no copy-up on overlay)."})
		rows, err = bench.Measure(ctx, e.o, 1, runs, subjects(nil, sqlCopy))
		if err != nil {
			return err
		}
		copies = append(copies, bench.Table{Title: "Table copy, " + label, Unit: "ms", Baseline: stHost, Rows: rows,
			Note: "Copies the table within the database file: on overlay the first write copies the whole file up from the image layer."})
		os.RemoveAll(rootfs)
		os.RemoveAll(work)
	}
	rep.Heading("SQLite on databases of growing size")
	rep.Para("The sqlite3 shell from Debian, with its libraries, in the container. The plain copy is left out here: it is an ordinary " +
		"folder on the host's file system, so its figures are the host's.")
	for i := range reads {
		rep.Table(reads[i])
		rep.Table(copies[i])
	}
	var groups []string
	for _, sz := range sizes {
		groups = append(groups, sz.label)
	}
	rep.Plot("storage-sqlite.svg", "SQLite table copy by database size", bench.BarsOf("SQLite table copy, median ms, by database size",
		groups, []string{stHost, stOverlay, stVolume}, copies))
	lr, lc := reads[len(reads)-1], copies[len(copies)-1]
	rep.Para("On the %s database a query through overlay takes %s of the host's time and a table copy %s (volume: %s and %s). %s",
		groups[len(groups)-1], bench.FormatRatio(lr.Ratio(stOverlay, stHost)), bench.FormatRatio(lc.Ratio(stOverlay, stHost)),
		bench.FormatRatio(lr.Ratio(stVolume, stHost)), bench.FormatRatio(lc.Ratio(stVolume, stHost)),
		copyUpWords(lc.Ratio(stOverlay, stHost), lc.Ratio(stVolume, stHost)))
	return nil
}

func copyUpWords(overlay, volume float64) string {
	if overlay > 1.1 && overlay > volume {
		return fmt.Sprintf("The overlay's extra %.0f %% is the copy-up of the database file on its first write: shoal loses here, "+
			"and a database that an app writes belongs in a volume.", (overlay-1)*100)
	}
	return "The copy-up of the database file on its first write costs less than 10 % of the copy here."
}
