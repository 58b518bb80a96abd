package cluster

import (
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode and checks that every
// figure was measured.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("cluster")
	benchtest.Quick(t, s, func(t *testing.T, rep *bench.Report, _ string) {
		benchtest.CheckTables(t, rep, map[string][]string{
			"A node dies: until the cluster knows":                     {rowDown, rowLeader},
			"A node holding replicas dies: until they serve elsewhere": {rowHeal, rowHealDaemon},
			"Failed requests while a node holding replicas dies":       {rowHealFailed, rowHealDaemonFailed},
			"Where the time goes":                                      {rowLost, rowStart, rowStartDaemon},
			"Through a proxy hop to another node":                      {rowLocal, rowHop},
			"Placement across nodes":                                   {rowPlace3, rowPlace100},
		})
	})
}
