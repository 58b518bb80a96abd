package kit

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestStartTimings(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon.log")
	log := `{"time":"2026-11-29T11:32:53Z","level":"DEBUG","msg":"serving: start timing","app":"hello-premade-1","replica":"hello-premade-1-7c749456","premade":true,"start":291240,"boot":77965665,"probes":42,"route":1664842,"total":94905334,"woken":300000,"since_woken":95205334}
{"time":"2026-11-29T11:32:54Z","level":"DEBUG","msg":"serving: start timing","app":"hello-warm","replica":"hello-warm-1","premade":false,"start":21000000,"boot":5000000,"probes":3,"route":1000000,"total":27000000}
{"time":"2026-11-29T11:32:55Z","level":"DEBUG","msg":"serving: start timing","app":"hello-premade-2","replica":"hello-premade-2-1","premade":true,"start":100000,"boot":20000000,"probes":10,"route":2000000,"total":22100000}
not json
{"time":"2026-11-29T11:32:56Z","level":"INFO","msg":"serving: ready","app":"hello-premade-2"}
`
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &Daemon{logPath: p}
	tm, probes := d.StartTimings("hello-premade", true)
	if got := tm["boot"]; len(got) != 2 || got[0] != 77965665 || got[1] != 20*time.Millisecond {
		t.Errorf("boot = %v", got)
	}
	if got := tm["woken"]; len(got) != 1 || got[0] != 300*time.Microsecond {
		t.Errorf("woken = %v (only the start a request waited for has it)", got)
	}
	if len(probes) != 2 || probes[0] != 42 || probes[1] != 10 {
		t.Errorf("probes = %v", probes)
	}
	if tm, _ := d.StartTimings("hello", false); len(tm["start"]) != 1 {
		t.Errorf("the plain start of hello-warm: %v", tm)
	}
}
