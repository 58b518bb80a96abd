package cluster

import (
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode and checks that the node
// death figures were measured.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("cluster")
	benchtest.Quick(t, s, func(t *testing.T, rep *bench.Report, _ string) {
		benchtest.CheckTables(t, rep, map[string][]string{
			"A node dies: until the cluster knows": {rowDown, rowLeader},
		})
	})
}
