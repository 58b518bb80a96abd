package serving

import (
	"math"
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode and checks its report.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("serving")
	benchtest.Quick(t, s, checkQuickServing)
}

// checkQuickServing checks that the serving report measured every row that
// must have numbers on any host, and that the targets section is there.
func checkQuickServing(t *testing.T, rep *bench.Report, _ string) {
	must := map[string][]string{
		"Cold start to first byte":                          {svColdHello, svPremadeHello, svBareHello, svColdSlowboot},
		"Thaw to first byte, beside a warm request":         {svThawHello, svThawSlowboot, svWarm},
		"Requests per second":                               {svShoal, svNginx, svDirect},
		"Latency p99 under load":                            {svShoal, svNginx, svDirect},
		"HTTP/2 requests per second, one connection":        {svH2Shoal, svH2Nginx},
		"gRPC unary calls per second, one connection":       {svGRPCShoal, svGRPCNginx},
		"HTTPS requests per second, kept-alive connections": {svTLSShoal, svTLSNginx, svTLSCaddy},
		"New TLS handshakes per second":                     {svTLSShoal, svTLSNginx, svTLSCaddy},
		"Resumed TLS handshakes per second":                 {svTLSShoal, svTLSNginx, svTLSCaddy},
		"Latency under ab, before and after":                {svOutBefore},
	}
	benchtest.CheckTables(t, rep, must)
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

func TestParseH2load(t *testing.T) {
	out := `starting benchmark...
spawning thread #0: 1 total client(s). Timing-based test with 1s of warm-up time and 5s of main duration for measurements.
Warm-up started for thread #0.
progress: 10% of clients started
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 6.00s, 21330.60 req/s, 2.31MB/s
requests: 106653 total, 106753 started, 106653 done, 106650 succeeded, 3 failed, 1 errored, 2 timeout
status codes: 106650 2xx, 0 3xx, 4 4xx, 0 5xx
traffic: 11.53MB (12091466) total, 418.71KB (428762) headers (space savings 96.03%), 10.17MB (10665300) data
`
	r, err := parseH2load(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.rps != 21330.6 || r.done != 106653 || r.failed != 10 {
		t.Errorf("parseH2load = %+v", r)
	}
	if _, err := parseH2load("connect: refused"); err == nil {
		t.Error("parseH2load of an error message: no error")
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
