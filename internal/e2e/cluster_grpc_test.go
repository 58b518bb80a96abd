package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shoal-run/shoal/internal/api/types"
)

// TestClusterGRPCStreamsThroughHop: a gRPC client calls, through the proxy
// of a node without a replica, an app whose one replica runs on another
// node: a unary call, a server stream message by message, a bidirectional
// stream where each message goes only once the last one's answer came
// back (it stalled when the hop was HTTP/1.1), and an error status in its
// trailers.
func TestClusterGRPCStreamsThroughHop(t *testing.T) {
	c := startClusterWith(t, 2, true)
	lead := routesLeader(c)
	var far, near *clusterNode // the replica's node, the client's
	for _, nd := range c.nodes {
		if nd == lead {
			near = nd
		} else {
			far = nd
		}
	}
	dir := filepath.Join(examples(t), "grpcecho")
	if r := lead.shoal("image", "build", dir, "--tag", "grpcecho:1", "--entrypoint", "/grpcecho", "--port", "8080"); r.code != 0 {
		t.Fatalf("image build on %s: %s", lead.name, r.stderr)
	}
	m := strings.Replace(grpcEchoManifest(t), "min = 0", "min = 1", 1) + fmt.Sprintf("\n[placement]\nnodes = [%q]\n", far.name)
	if !strings.Contains(m, "min = 1") {
		t.Fatal("the manifest kept min = 0")
	}
	f := filepath.Join(t.TempDir(), "shoal.toml")
	if err := os.WriteFile(f, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := lead.shoal("app", "deploy", "-f", f); r.code != 0 {
		t.Fatalf("deploy: %s", r.stderr)
	}
	var replica string
	waitFor(t, "a ready replica of grpcecho on "+far.name, func() bool {
		var a types.App
		r := lead.shoal("app", "status", "grpcecho", "--output", "json")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &a) != nil {
			return false
		}
		for _, rep := range a.Replicas {
			if rep.State == "ready" && rep.Node == far.name {
				replica = rep.ID
				return true
			}
		}
		return false
	})

	cc, err := grpc.NewClient("passthrough:///"+near.Proxy(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("grpcecho.localhost"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The route reaches the client's node a little after the replica is
	// ready: the first call is tried until it is answered.
	out := new(wrapperspb.StringValue)
	waitFor(t, "a unary call through "+near.name, func() bool {
		return cc.Invoke(ctx, "/grpcecho.Echo/Say", wrapperspb.String("hi"), out) == nil
	})
	if want := "hi from " + replica; out.GetValue() != want {
		t.Fatalf("Say: %q, want %q", out.GetValue(), want)
	}

	s, err := cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "Count", ServerStreams: true}, "/grpcecho.Echo/Count")
	if err != nil {
		t.Fatal(err)
	}
	s.SendMsg(wrapperspb.Int32(5))
	s.CloseSend()
	for i := 1; i <= 5; i++ {
		m := new(wrapperspb.StringValue)
		if err := s.RecvMsg(m); err != nil || !strings.HasPrefix(m.GetValue(), strconv.Itoa(i)+" of 5 from ") {
			t.Fatalf("Count: message %d: %q, %v", i, m.GetValue(), err)
		}
	}
	if err := s.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Fatalf("Count after 5 messages: %v, want the end with status OK", err)
	}

	chat, err := cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}, "/grpcecho.Echo/Chat")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		msg := "m" + strconv.Itoa(i)
		if err := chat.SendMsg(wrapperspb.String(msg)); err != nil {
			t.Fatalf("Chat: send %d: %v", i, err)
		}
		in := new(wrapperspb.StringValue)
		if err := chat.RecvMsg(in); err != nil || in.GetValue() != msg+" from "+replica {
			t.Fatalf("Chat: answer %d: %q, %v", i, in.GetValue(), err)
		}
	}
	chat.CloseSend()
	if err := chat.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Fatalf("Chat after the client's end: %v, want status OK", err)
	}

	s, err = cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "Count", ServerStreams: true}, "/grpcecho.Echo/Count")
	if err != nil {
		t.Fatal(err)
	}
	s.SendMsg(wrapperspb.Int32(-1))
	s.CloseSend()
	err = s.RecvMsg(new(wrapperspb.StringValue))
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != "count -1: must be 0-1000" {
		t.Fatalf("Count(-1) through the hop: %v", err)
	}
}
