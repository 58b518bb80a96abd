package stateful

import (
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode (one failover, of
// galera-0) and checks its report: the time to 3 synced members and the
// failed transactions were measured, and no committed row was lost (a
// lost row fails the run).
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("stateful")
	benchtest.Quick(t, s, func(t *testing.T, rep *bench.Report, _ string) {
		benchtest.CheckTables(t, rep, map[string][]string{
			"Until 3 synced members again":            {rowRecover},
			"Failed transactions during the failover": {rowWriter},
		})
	})
}
