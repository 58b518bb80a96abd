package resilience

import (
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode and checks its report.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("resilience")
	benchtest.Quick(t, s, checkQuickResilience)
}

// checkQuickResilience checks that the replacement of a killed replica,
// the rolling upgrade and the rollback were measured, with their failed
// requests and the commands' times.
func checkQuickResilience(t *testing.T, rep *bench.Report, _ string) {
	must := map[string][]string{
		"Under load: until traffic is served as it should be": {rsCold, rsKill, rsRollout, rsRollback, rsDaemon, rsDeployCmd, rsRollbackCmd},
		"Failed requests during each":                         {rsKill, rsRollout, rsRollback, rsDaemon},
	}
	benchtest.CheckTables(t, rep, must)
}
