package dataplane

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/proxy"
)

// ACME challenges set through the client are answered by the proxy
// process for any host; a bad one is refused naming the field; an empty
// set ends the answers.
func TestChallengesThroughControl(t *testing.T) {
	s := serveInTest(t, "")
	ctx := context.Background()
	get := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+proxy.ChallengePath+"tok", nil)
		req.Host = "www.example.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if err := s.client.SetChallenges(ctx, []proxy.Challenge{{Type: proxy.HTTP01, Domain: "www.example.test", Token: "tok", KeyAuth: "tok.k"}}); err != nil {
		t.Fatal(err)
	}
	if code, body := get(); code != 200 || body != "tok.k" {
		t.Fatalf("challenge: %d %q", code, body)
	}
	if err := s.client.SetChallenges(ctx, []proxy.Challenge{{Type: "dns-01", Domain: "x.test"}}); err == nil {
		t.Fatal("a dns-01 challenge was taken")
	}
	if err := s.client.SetChallenges(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(); code != 404 {
		t.Fatalf("after the challenges went: %d", code)
	}
	// A challenge the proxy holds that this client did not set (left by
	// the daemon before a restart that adopted the proxy) goes at Sync,
	// though this client's set is empty.
	req, _ := http.NewRequest(http.MethodPut, "http://proxy/v1/challenges",
		strings.NewReader(`[{"type":"http-01","domain":"www.example.test","token":"tok","key_auth":"tok.k"}]`))
	resp, err := s.client.hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("put a challenge behind the client's back: %v %v", err, resp)
	}
	resp.Body.Close()
	if code, body := get(); code != 200 || body != "tok.k" {
		t.Fatalf("challenge put behind the client's back: %d %q", code, body)
	}
	if err := s.client.Sync(); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(); code != 404 {
		t.Fatalf("after Sync, a challenge the client did not set is answered: %d", code)
	}
}
