package daemon

import (
	"io"
	"log/slog"
	"maps"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/route"
)

// The daemon's own ports, by flag, are kept from TCP apps.
func TestOwnPorts(t *testing.T) {
	d := &Daemon{proxyAddr: "127.0.0.1:8080", cfg: Config{Proxy: "127.0.0.1:8080", ProxyTLS: ":443", APITCP: "127.0.0.1:7070",
		UI: "127.0.0.1:7080", DebugAddr: "127.0.0.1:6060", Advertise: "10.0.0.11:7071", SelfAPIPort: 0,
		Store: "etcd://10.0.0.2:2379, 10.0.0.3:12379"}}
	got := d.ownPorts("http://10.77.0.1:39111")
	want := map[int]string{8080: "--proxy", 443: "--proxy-tls", 7070: "--api-tcp", 7080: "--ui", 6060: "--debug-pprof",
		7071: "--advertise", 39111: "--self-api-port", 2379: "--store", 12379: "--store"}
	if !maps.Equal(got, want) {
		t.Fatalf("ownPorts = %v, want %v", got, want)
	}
}

func TestValidateProxyTCPPorts(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		ports string
		want  route.PortRange // zero: invalid
	}{
		{"", route.DefaultTCPPorts},
		{"10000-19999", route.PortRange{Lo: 10000, Hi: 19999}},
		{"13306", route.PortRange{Lo: 13306, Hi: 13306}},
		{"19999-10000", route.PortRange{}},
		{"0-100", route.PortRange{}},
		{"tcp", route.PortRange{}},
	} {
		cfg := Config{DataDir: "/tmp/d", RunDir: "/tmp/r", Node: "n1", ProxyTCPPorts: c.ports, Logger: quiet}
		err := cfg.Validate()
		switch {
		case c.want == (route.PortRange{}):
			if !errdefs.IsInvalid(err) || errdefs.Field(err) != "--proxy-tcp-ports" {
				t.Errorf("--proxy-tcp-ports %q: %v, want it refused", c.ports, err)
			}
		case err != nil:
			t.Errorf("--proxy-tcp-ports %q: %v", c.ports, err)
		case cfg.tcpPorts() != c.want:
			t.Errorf("--proxy-tcp-ports %q: %v, want %v", c.ports, cfg.tcpPorts(), c.want)
		}
	}
}
