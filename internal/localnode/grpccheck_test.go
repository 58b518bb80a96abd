package localnode

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shoal-run/shoal/internal/manifest"
)

// The gRPC check speaks the health protocol as grpc-go's own server
// answers it: SERVING passes; NOT_SERVING, an unknown service and no
// server fail, each saying why.
func TestGRPCHealthCheck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	hs.SetServingStatus("echo.Echo", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down.Down", healthpb.HealthCheckResponse_NOT_SERVING)
	addr := l.Addr().String()

	check := func(service string) error {
		h := manifest.Health{GRPC: true, GRPCService: service, Timeout: manifest.Duration{Duration: 10 * time.Second}}
		return probe(context.Background(), nil, h, addr, "shoal-health/test")
	}
	for _, s := range []string{"", "echo.Echo"} {
		if err := check(s); err != nil {
			t.Errorf("service %q: %v", s, err)
		}
	}
	for s, want := range map[string]string{"down.Down": "not serving (status 2)", "nope.Nope": "grpc-status \"5\""} {
		if err := check(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("service %q: %v, want an error with %q", s, err, want)
		}
	}
	hs.Shutdown() // every service NOT_SERVING
	if err := check(""); err == nil {
		t.Error("a server shutting down passed")
	}
	srv.Stop()
	if err := check(""); err == nil {
		t.Error("no server passed")
	}
}

// The answer's decoder takes what protobuf may send and refuses the rest.
func TestServingStatusDecode(t *testing.T) {
	for _, c := range []struct {
		msg  []byte
		want uint64
		err  bool
	}{
		{grpcFrame([]byte{0x08, 0x01}), 1, false},
		{grpcFrame(nil), 0, false},
		{grpcFrame([]byte{0x12, 0x02, 'h', 'i', 0x08, 0x02}), 2, false}, // an unknown field first
		{grpcFrame([]byte{0x08}), 0, true},
		{grpcFrame([]byte{0x12, 0x05, 'h'}), 0, true},
		{[]byte{1, 0, 0, 0, 0}, 0, true},
		{[]byte{0, 0, 0, 0, 9, 8}, 0, true},
	} {
		got, err := servingStatus(c.msg)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%x: %d, %v", c.msg, got, err)
		}
	}
	if got := healthRequest("a.B"); string(got) != "\x0a\x03a.B" {
		t.Errorf("request %x", got)
	}
}
