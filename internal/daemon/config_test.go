package daemon

import (
	"io"
	"log/slog"
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
