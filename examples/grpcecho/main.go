// Command grpcecho is shoal's example gRPC app: a gRPC server on $PORT
// (default 8080), cleartext HTTP/2 as `protocol = "grpc"` has the proxy
// speak to it, with two methods of the service grpcecho.Echo and the
// standard health service (grpc.health.v1, SERVING for "" and
// grpcecho.Echo):
//
//   - Say (unary): a google.protobuf.StringValue in, "<value> from
//     <replica>" back;
//   - Count (server streaming): a google.protobuf.Int32Value n in (at most
//     1000), n StringValue messages "<i> of <n> from <replica>" back, one
//     every $COUNT_INTERVAL (default 10ms);
//   - Chat (bidirectional streaming): each StringValue in answered at once
//     with "<value> from <replica>", until the client closes its side.
//
// The messages are the well-known wrapper types, so neither the server nor
// a client needs generated code: a client calls "/grpcecho.Echo/Say" with
// grpc.ClientConn.Invoke, and "/grpcecho.Echo/Count" with NewStream.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Service is the full name of the echo service.
const Service = "grpcecho.Echo"

type echo struct {
	replica  string
	interval time.Duration
}

func (e *echo) say(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(in.GetValue() + " from " + e.replica), nil
}

func (e *echo) count(in *wrapperspb.Int32Value, out grpc.ServerStream) error {
	n := in.GetValue()
	if n < 0 || n > 1000 {
		return status.Errorf(codes.InvalidArgument, "count %d: must be 0-1000", n)
	}
	for i := int32(1); i <= n; i++ {
		if err := out.SendMsg(wrapperspb.String(fmt.Sprintf("%d of %d from %s", i, n, e.replica))); err != nil {
			return err
		}
		if i < n {
			select {
			case <-time.After(e.interval):
			case <-out.Context().Done():
				return out.Context().Err()
			}
		}
	}
	return nil
}

func (e *echo) chat(s grpc.ServerStream) error {
	for {
		in := new(wrapperspb.StringValue)
		if err := s.RecvMsg(in); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := s.SendMsg(wrapperspb.String(in.GetValue() + " from " + e.replica)); err != nil {
			return err
		}
	}
}

// desc is grpcecho.Echo's service description, written by hand as
// protoc-gen-go-grpc would write it.
func desc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: Service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Say",
			Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				return srv.(*echo).say(ctx, in)
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Count",
			ServerStreams: true,
			Handler: func(srv any, stream grpc.ServerStream) error {
				in := new(wrapperspb.Int32Value)
				if err := stream.RecvMsg(in); err != nil {
					return err
				}
				return srv.(*echo).count(in, stream)
			},
		}, {
			StreamName:    "Chat",
			ServerStreams: true,
			ClientStreams: true,
			Handler: func(srv any, stream grpc.ServerStream) error {
				return srv.(*echo).chat(stream)
			},
		}},
	}
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	interval := 10 * time.Millisecond
	if v := os.Getenv("COUNT_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			log.Fatalf("COUNT_INTERVAL %q: %v", v, err)
		}
		interval = d
	}
	replica := os.Getenv("SHOAL_REPLICA")
	if replica == "" {
		replica, _ = os.Hostname()
	}
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(desc(), &echo{replica: replica, interval: interval})
	hs := health.NewServer()
	hs.SetServingStatus(Service, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	log.Printf("grpcecho: listening on :%s", port)
	log.Fatal(srv.Serve(l))
}
