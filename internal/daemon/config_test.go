package daemon

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestValidateClusterFlags(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		advertise string
		ttl       time.Duration
		field     string // "" when valid
	}{
		{"10.0.0.11:7070", 0, ""},
		{"node1.example.org:7070", 3 * time.Second, ""},
		{"[fd00::11]:7070", 2 * time.Second, ""},
		{"", time.Minute, ""},
		{"0.0.0.0:7070", 0, "--advertise"},
		{"[::]:7070", 0, "--advertise"},
		{":7070", 0, "--advertise"},
		{"10.0.0.11", 0, "--advertise"},
		{"10.0.0.11:0", 0, "--advertise"},
		{"10.0.0.11:http", 0, "--advertise"},
		{"bad_host!:7070", 0, "--advertise"},
		{"", 500 * time.Millisecond, "--node-ttl"},
		{"", 2 * time.Minute, "--node-ttl"},
		{"", -time.Second, "--node-ttl"},
	} {
		cfg := Config{DataDir: "/tmp/d", RunDir: "/tmp/r", Node: "n1", Advertise: c.advertise, NodeTTL: c.ttl, Logger: quiet}
		err := cfg.Validate()
		switch {
		case c.field == "" && err != nil:
			t.Errorf("advertise %q, ttl %s: %v; want valid", c.advertise, c.ttl, err)
		case c.field != "" && (!errdefs.IsInvalid(err) || errdefs.Field(err) != c.field):
			t.Errorf("advertise %q, ttl %s: %v; want invalid %s", c.advertise, c.ttl, err, c.field)
		}
	}
}

func TestValidateAdvertiseProxy(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		advertise, proxy, advertiseProxy string
		want                             string // the result, or the flag named
	}{
		{"10.0.0.11:7070", "0.0.0.0:8080", "", "10.0.0.11:8080"},
		{"10.0.0.11:7070", "10.0.0.11:8081", "", "10.0.0.11:8081"},
		{"[fd00::11]:7070", "[::]:8080", "", "[fd00::11]:8080"},
		{"10.0.0.11:7070", "127.0.0.1:8080", "", ""},
		{"10.0.0.11:7070", "", "", ""},
		{"10.0.0.11:7070", "off", "", ""},
		{"", "0.0.0.0:8080", "", ""},
		{"10.0.0.11:7070", "127.0.0.1:8080", "192.0.2.7:80", "192.0.2.7:80"},
		{"", "0.0.0.0:8080", "proxy.example.org:8080", "proxy.example.org:8080"},
		{"10.0.0.11:7070", "0.0.0.0:8080", "0.0.0.0:8080", "--advertise-proxy"},
		{"10.0.0.11:7070", "0.0.0.0:8080", "10.0.0.11", "--advertise-proxy"},
		{"10.0.0.11:7070", "0.0.0.0:8080", "10.0.0.11:0", "--advertise-proxy"},
		{"10.0.0.11:7070", "off", "10.0.0.11:8080", "--advertise-proxy"},
	} {
		cfg := Config{DataDir: "/tmp/d", RunDir: "/tmp/r", Node: "n1", Advertise: c.advertise, Proxy: c.proxy,
			AdvertiseProxy: c.advertiseProxy, Logger: quiet}
		err := cfg.Validate()
		if strings.HasPrefix(c.want, "--") {
			if !errdefs.IsInvalid(err) || errdefs.Field(err) != c.want {
				t.Errorf("%+v: %v; want invalid %s", c, err, c.want)
			}
			continue
		}
		if err != nil || cfg.AdvertiseProxy != c.want {
			t.Errorf("%+v: %q, %v; want %q", c, cfg.AdvertiseProxy, err, c.want)
		}
	}
}

func TestValidateTrustedProxies(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		list  []string
		valid bool
	}{
		{nil, true},
		{[]string{"10.0.0.0/8", "192.0.2.1", "2001:db8::/32"}, true},
		{[]string{"10.0.0.0/33"}, false},
		{[]string{"proxy.example.org"}, false},
	} {
		cfg := Config{DataDir: "/tmp/d", RunDir: "/tmp/r", Node: "n1", TrustedProxies: c.list, Logger: quiet}
		err := cfg.Validate()
		switch {
		case c.valid && err != nil:
			t.Errorf("%q: %v; want valid", c.list, err)
		case !c.valid && (!errdefs.IsInvalid(err) || errdefs.Field(err) != "--trusted-proxies"):
			t.Errorf("%q: %v; want invalid --trusted-proxies", c.list, err)
		}
	}
}

// --bridge-ports sizes the bridges' slices: 0 (the default) to 1021.
func TestValidateBridgePorts(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for ports, valid := range map[int]bool{0: true, 1: true, 4: true, 1021: true, -1: false, 1022: false, 4096: false} {
		cfg := Config{DataDir: "/tmp/d", RunDir: "/tmp/r", Node: "n1", BridgePorts: ports, Logger: quiet}
		err := cfg.Validate()
		if valid != (err == nil) || (!valid && (!errdefs.IsInvalid(err) || errdefs.Field(err) != "--bridge-ports")) {
			t.Errorf("--bridge-ports %d: %v, want valid %v", ports, err, valid)
		}
	}
}
