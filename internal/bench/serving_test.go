package bench

import (
	"math"
	"testing"
)

func init() { quickChecks["serving"] = checkQuickServing }

// checkQuickServing checks that the serving report measured every row that
// must have numbers on any host, and that the targets section is there.
func checkQuickServing(t *testing.T, rep *Report, _ string) {
	must := map[string][]string{
		"Cold start to first byte":                  {svColdHello, svColdSlowboot},
		"Thaw to first byte, beside a warm request": {svThawHello, svThawSlowboot, svWarm},
		"Requests per second":                       {svShoal, svNginx, svDirect},
		"Latency p99 under load":                    {svShoal, svNginx, svDirect},
		"Latency under ab, before and after":        {svOutBefore},
	}
	checkTables(t, rep, must)
}

func TestParseWrk(t *testing.T) {
	out := `Running 1s test @ http://127.0.0.1:8080/
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.10ms    2.00ms  40.00ms   95.00%
  Latency Distribution
     50%  455.00us
     75%    1.00ms
     90%    2.00ms
     99%    1.20s
  15323 requests in 1.00s, 1.90MB read
  Socket errors: connect 1, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 4
Requests/sec:  15323.50
Transfer/sec:      1.90MB
`
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.rps != 15323.5 || math.Abs(r.p50-0.455) > 1e-9 || r.p99 != 1200 || r.failed != 10 || r.requests != 15323 {
		t.Errorf("parseWrk = %+v", r)
	}
	if _, err := parseWrk("unable to connect"); err == nil {
		t.Error("parseWrk of an error message: no error")
	}
}

func TestBurnReplica(t *testing.T) {
	if got := burnReplica("cpuburn from burn-step-1-0a1b2c3d: 20ms of CPU in 21ms (abcd)\n"); got != "burn-step-1-0a1b2c3d" {
		t.Errorf("burnReplica = %q", got)
	}
	if got := burnReplica("hello"); got != "" {
		t.Errorf("burnReplica(hello) = %q", got)
	}
}

// checkTables fails t unless rep has each table of must, and each of
// those has numbers in the rows must names.
func checkTables(t *testing.T, rep *Report, must map[string][]string) {
	t.Helper()
	seen := map[string]bool{}
	for _, tab := range rep.Tables() {
		seen[tab.Title] = true
		for _, name := range must[tab.Title] {
			if w := tab.Row(name); !w.OK() {
				t.Errorf("table %q row %q has no numbers: %s", tab.Title, name, w.Err)
			}
		}
	}
	for title := range must {
		if !seen[title] {
			t.Errorf("no table %q", title)
		}
	}
}
