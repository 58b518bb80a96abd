package serving

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/route"
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

// A TCP app's listen port must be within the daemon's --proxy-tcp-ports
// and not one of the daemon's own listening ports.
func TestTCPListenOutsidePortsOrDaemonsRefused(t *testing.T) {
	h := newHarnessOpts(t, func(o *testOpts) {
		o.TCPPorts = route.PortRange{Lo: 10000, Hi: 19999}
		o.OwnPorts = map[int]string{17070: "--api-tcp"}
	})
	deploy := func(name string, port int) error {
		m := fmt.Sprintf("name = %q\nimage = \"hello:1\"\nport = %d\nprotocol = \"tcp\"\nlisten = %d\n", name, h.port, port)
		_, err := h.m.Deploy(context.Background(), types.DeployRequest{Manifest: m})
		return err
	}
	for _, c := range []struct {
		port int
		want string
	}{
		{25, "port 25 is outside the ports TCP apps may listen on, 10000-19999 (the daemon's --proxy-tcp-ports)"},
		{20000, "port 20000 is outside the ports TCP apps may listen on, 10000-19999"},
		{17070, "port 17070 is the daemon's own (--api-tcp)"},
	} {
		err := deploy("db", c.port)
		if !errdefs.IsInvalid(err) || errdefs.Field(err) != "listen" || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("listen = %d: %v, want %q", c.port, err, c.want)
		}
		if _, err := h.m.Get(context.Background(), "db"); !errdefs.IsNotFound(err) {
			t.Fatalf("after a refused deploy on %d, the app: %v", c.port, err)
		}
	}
	if err := deploy("db", 13306); err != nil {
		t.Fatalf("a port in the range: %v", err)
	}
}

// With no range set, TCP apps keep off the ports below 10000.
func TestTCPListenDefaultPorts(t *testing.T) {
	h := newHarness(t)
	m := fmt.Sprintf("name = \"db\"\nimage = \"hello:1\"\nport = %d\nprotocol = \"tcp\"\nlisten = 7070\n", h.port)
	_, err := h.m.Deploy(context.Background(), types.DeployRequest{Manifest: m})
	if !errdefs.IsInvalid(err) || errdefs.Field(err) != "listen" || !strings.Contains(err.Error(), "10000-65535") {
		t.Fatalf("listen = 7070 by default: %v", err)
	}
}

// When the proxy says a TCP app's port has no listener of its own, the
// app's status says why and one warning event tells it; a listening
// port shows where.
func TestTCPListenFailureTold(t *testing.T) {
	h := newHarness(t)
	m := fmt.Sprintf("name = \"hello\"\nimage = \"hello:1\"\nport = %d\nprotocol = \"tcp\"\nlisten = 13306\n", h.port)
	if _, err := h.m.Deploy(context.Background(), types.DeployRequest{Manifest: m}); err != nil {
		t.Fatal(err)
	}
	why := "listen tcp 0.0.0.0:13306: bind: address already in use"
	h.r.mu.Lock()
	h.r.load = route.Load{TCPError: why}
	h.r.mu.Unlock()
	for range 3 {
		h.advance(time.Second)
	}
	a, err := h.m.Get(context.Background(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	if a.TCPError != why || a.TCP != "" {
		t.Fatalf("status: tcp %q, tcp_error %q; want the proxy's error", a.TCP, a.TCPError)
	}
	warned := 0
	for _, e := range h.eventsOf("warning") {
		if strings.Contains(e, "listen = 13306: the proxy cannot listen: "+why) {
			warned++
		}
	}
	if warned != 1 {
		t.Fatalf("%d warning events naming the failure, want 1: %q", warned, h.eventsOf("warning"))
	}
	h.r.mu.Lock()
	h.r.load = route.Load{TCP: "0.0.0.0:13306"}
	h.r.mu.Unlock()
	h.advance(time.Second)
	if a, _ = h.m.Get(context.Background(), "hello"); a.TCP != "0.0.0.0:13306" || a.TCPError != "" {
		t.Fatalf("status once listening: tcp %q, tcp_error %q", a.TCP, a.TCPError)
	}
}
