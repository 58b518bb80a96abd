package e2e

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// grpcEchoManifest is examples/grpcecho's, with min = 0.
func grpcEchoManifest(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/grpcecho/shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "min = 0") || !strings.Contains(string(b), `protocol = "grpc"`) {
		t.Fatal("examples/grpcecho/shoal.toml no longer says min = 0 and protocol = \"grpc\"")
	}
	return string(b)
}

// A gRPC client calls an app at zero replicas through the proxy: the call
// wakes it (its replica ready once the gRPC health check passes) and is
// answered; a server stream comes message by message, and a call's status
// and the trailers it travels in arrive intact, error or not.
func TestGRPCEchoFromZero(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("grpcecho")
	d.deploy(grpcEchoManifest(t))
	if a := d.app("grpcecho"); len(a.Replicas) != 0 {
		t.Fatalf("a fresh app with min 0 has replicas: %+v", a.Replicas)
	}
	proxy := d.proxyAddr()
	cc, err := grpc.NewClient("passthrough:///"+proxy, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("grpcecho.localhost"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, "/grpcecho.Echo/Say", wrapperspb.String("hi"), out); err != nil {
		t.Fatalf("Say from zero replicas: %v", err)
	}
	a := d.app("grpcecho")
	if len(a.Replicas) != 1 || a.Replicas[0].State != "ready" {
		t.Fatalf("after the first call: %+v", a.Replicas)
	}
	if want := "hi from " + a.Replicas[0].ID; out.GetValue() != want {
		t.Fatalf("Say: %q, want %q", out.GetValue(), want)
	}

	desc := &grpc.StreamDesc{StreamName: "Count", ServerStreams: true}
	s, err := cc.NewStream(ctx, desc, "/grpcecho.Echo/Count")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(wrapperspb.Int32(5)); err != nil {
		t.Fatal(err)
	}
	s.CloseSend()
	for i := 1; i <= 5; i++ {
		m := new(wrapperspb.StringValue)
		if err := s.RecvMsg(m); err != nil {
			t.Fatalf("Count: message %d: %v", i, err)
		}
		if !strings.HasPrefix(m.GetValue(), strconv.Itoa(i)+" of 5 from ") {
			t.Fatalf("Count: message %d: %q", i, m.GetValue())
		}
	}
	if err := s.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Fatalf("Count after 5 messages: %v, want the end with status OK", err)
	}

	// An error status with its message comes through as the app sent it.
	s, err = cc.NewStream(ctx, desc, "/grpcecho.Echo/Count")
	if err != nil {
		t.Fatal(err)
	}
	s.SendMsg(wrapperspb.Int32(-1))
	s.CloseSend()
	err = s.RecvMsg(new(wrapperspb.StringValue))
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != "count -1: must be 0-1000" {
		t.Fatalf("Count(-1): %v", err)
	}
	// A method the app does not have: its server's UNIMPLEMENTED.
	err = cc.Invoke(ctx, "/grpcecho.Echo/Nope", wrapperspb.String("x"), out)
	if st, _ := status.FromError(err); st.Code() != codes.Unimplemented {
		t.Fatalf("an unknown method: %v", err)
	}
}
