package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// The proxy's own answers to a gRPC call (HTTP/2, application/grpc) are
// trailers-only gRPC answers: 200, grpc-status UNIMPLEMENTED for a host no
// app serves, UNAVAILABLE for a replica that cannot be reached or an app
// that is unavailable, and grpc-message saying why; other clients still
// get the JSON error.
func TestGRPCRefusalsAreTrailersOnly(t *testing.T) {
	f := newFront(t, Options{})
	gone := routeTo("gone")
	gone.Endpoints = []route.Endpoint{{ID: "gone-a", Addr: deadAddr(t), Protocol: route.ProtocolH2C}}
	un := routeTo("down", namedBackend(t, "down"))
	un.Unavailable = "app is being deleted"
	f.p.Update([]route.Route{gone, un})
	c := h2cClient(t)
	call := func(host, ctype string) (*http.Response, string) {
		req := f.req(t, "POST", host, "/pkg.Svc/Method", strings.NewReader("\x00\x00\x00\x00\x00"))
		req.Header.Set("Content-Type", ctype)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("call to %s: %v", host, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for host, want := range map[string]string{"nobody.localhost": "12", "gone.localhost": "14", "down.localhost": "14"} {
		resp, body := call(host, "application/grpc")
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 || resp.Header.Get("Content-Type") != "application/grpc" ||
			resp.Header.Get("Grpc-Status") != want || resp.Header.Get("Grpc-Message") == "" || body != "" {
			t.Errorf("gRPC call to %s: %s %d %v %q; want 200, grpc-status %s, a grpc-message, no body",
				host, resp.Proto, resp.StatusCode, resp.Header, body, want)
		}
	}
	if resp, body := call("nobody.localhost", "application/json"); resp.StatusCode != 404 || apiError(t, body).Error == "" {
		t.Errorf("a JSON call to no app: %d %q", resp.StatusCode, body)
	}
	if got := grpcMessage("no app: 100% \"x\"\né"); got != `no app: 100%25 "x"%0A%C3%A9` {
		t.Errorf("grpcMessage: %q", got)
	}
}
