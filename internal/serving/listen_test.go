package serving

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// A TCP app's route carries its listen port, and a second app asking for
// the same port is refused, naming the app that has it.
func TestTCPAppRouteAndListenConflict(t *testing.T) {
	h := newHarness(t)
	deploy := func(name string, port int) error {
		m := fmt.Sprintf("name = %q\nimage = \"hello:1\"\nport = %d\nprotocol = \"tcp\"\nlisten = %d\n[scale]\nmin = 1\n", name, h.port, port)
		_, err := h.m.Deploy(context.Background(), types.DeployRequest{Manifest: m})
		return err
	}
	if err := deploy("db", 13306); err != nil {
		t.Fatal(err)
	}
	h.wait("db's route", func() bool { return len(h.r.route("db").Endpoints) == 1 })
	if rt := h.r.route("db"); rt.TCPPort != 13306 {
		t.Fatalf("db's route has TCPPort %d, want 13306", rt.TCPPort)
	}
	err := deploy("other", 13306)
	if !errdefs.IsInvalid(err) || errdefs.Field(err) != "listen" || !strings.Contains(err.Error(), `port 13306 is app "db"'s`) {
		t.Fatalf("a second app on db's port: %v", err)
	}
	// The app itself may deploy again on its port, and another on another.
	if err := deploy("db", 13306); err != nil {
		t.Fatalf("db again: %v", err)
	}
	if err := deploy("other", 13307); err != nil {
		t.Fatalf("another port: %v", err)
	}
}

// A deploy's answer carries its warnings: a command starting with a shell
// over an image with an entrypoint (the entrypoint would run the shell).
func TestDeployAnswerWarns(t *testing.T) {
	h := newHarness(t)
	m := fmt.Sprintf("name = \"sh\"\nimage = \"hello:1\"\nport = %d\ncommand = [\"/bin/sh\", \"-c\", \"exec /hello\"]\n", h.port)
	a, err := h.m.Deploy(context.Background(), types.DeployRequest{Manifest: m, File: "sh.toml"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Warnings) != 1 || !strings.HasPrefix(a.Warnings[0], "sh.toml: ") || !strings.Contains(a.Warnings[0], "/hello") {
		t.Fatalf("deploy's warnings: %q, want one naming sh.toml and the entrypoint", a.Warnings)
	}
	m = fmt.Sprintf("name = \"plain\"\nimage = \"hello:1\"\nport = %d\n", h.port)
	if a, err = h.m.Deploy(context.Background(), types.DeployRequest{Manifest: m}); err != nil || len(a.Warnings) != 0 {
		t.Fatalf("a plain deploy: %v, warnings %q", err, a.Warnings)
	}
}
