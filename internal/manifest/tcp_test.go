package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestParseTCP(t *testing.T) {
	const base = "name = \"db\"\nimage = \"db:1\"\nport = 3306\n"
	c, err := Parse([]byte(base+"protocol = \"tcp\"\nlisten = 13306\n"), "shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.TCP() || c.Listen != 13306 || c.H2C() || !c.Health.TCP {
		t.Fatalf("tcp app: TCP %v listen %d h2c %v health tcp %v", c.TCP(), c.Listen, c.H2C(), c.Health.TCP)
	}
	plain, err := Parse([]byte(base), "shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if plain.TCP() || plain.Listen != 0 {
		t.Fatalf("http app: TCP %v listen %d", plain.TCP(), plain.Listen)
	}
	for _, tc := range []struct{ name, toml, field, msg string }{
		{"listen missing", "protocol = \"tcp\"\n", "listen", "is required with protocol = \"tcp\""},
		{"listen high", "protocol = \"tcp\"\nlisten = 70000\n", "listen", "70000 must be a port number"},
		{"listen negative", "protocol = \"tcp\"\nlisten = -1\n", "listen", "-1 must be a port number"},
		{"listen without tcp", "listen = 13306\n", "listen", "is only for protocol = \"tcp\""},
		{"listen with h2c", "protocol = \"h2c\"\nlisten = 13306\n", "listen", "is only for protocol"},
		{"domains", "protocol = \"tcp\"\nlisten = 1\ndomains = [\"db.example.test\"]\n", "domains", "not by host name"},
		{"sticky", "protocol = \"tcp\"\nlisten = 1\n[traffic]\nsticky = true\n", "traffic.sticky", "cannot be sticky"},
		{"http health", "protocol = \"tcp\"\nlisten = 1\n[health]\nhttp = \"/\"\n", "health", "over TCP or by a command"},
		{"max_connections", "protocol = \"tcp\"\nlisten = 1\n[scale]\nmax_connections = 8\n", "scale.max_connections", "does not bound"},
		{"unknown protocol", "protocol = \"udp\"\n", "protocol", `"udp" must be "http1", "h2c", "grpc" or "tcp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(base+tc.toml), "shoal.toml")
			if !errors.Is(err, errdefs.ErrInvalid) || errdefs.Field(err) != tc.field || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v (field %q), want field %q saying %q", err, errdefs.Field(err), tc.field, tc.msg)
			}
		})
	}
}
