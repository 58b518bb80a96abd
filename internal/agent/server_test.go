package agent

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// A node reached by name over real HTTP answers who it is.
func TestPing(t *testing.T) {
	st := testStore(t)
	srv := serve(t, (&Server{Name: "n1", Secret: testSecret}).Handler())
	addNode(t, st, "n1", srv)
	p, err := NewClient(st, testSecret).Ping(context.Background(), "n1")
	if err != nil || p.Node != "n1" {
		t.Fatalf("ping n1: %+v, %v", p, err)
	}
}

// A request without the cluster secret, or with a wrong one (as bearer or
// as basic), is answered 401 and never reaches a route.
func TestRefusedWithoutSecret(t *testing.T) {
	var reached atomic.Int32
	h := guard(testSecret, testLog(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
	}))
	srv := serve(t, h)
	for _, tc := range []struct {
		name string
		set  func(r *http.Request)
	}{
		{"none", func(r *http.Request) {}},
		{"wrong bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-s3cret-s3creu") }},
		{"prefix of the secret", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") }},
		{"empty bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") }},
		{"wrong basic", func(r *http.Request) { r.SetBasicAuth("shoal", "nope") }},
		{"secret as user name", func(r *http.Request) { r.SetBasicAuth(testSecret, "") }},
		{"no scheme", func(r *http.Request) { r.Header.Set("Authorization", testSecret) }},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+Prefix+"anything", nil)
		tc.set(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d %q; want 401 with a challenge", tc.name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("%d unauthenticated requests reached the handler", n)
	}
	for _, set := range []func(r *http.Request){
		func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testSecret) },
		func(r *http.Request) { r.SetBasicAuth("shoal", testSecret) },
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+Prefix+"anything", nil)
		set(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("with the secret: %d", resp.StatusCode)
		}
	}
	if n := reached.Load(); n != 2 {
		t.Fatalf("%d authenticated requests reached the handler; want 2", n)
	}
}

// A server with no secret refuses everything, the right-looking empty
// token included.
func TestNoSecretRefusesAll(t *testing.T) {
	st := testStore(t)
	srv := serve(t, (&Server{Name: "n1"}).Handler())
	addNode(t, st, "n1", srv)
	if _, err := NewClient(st, "").Ping(context.Background(), "n1"); err == nil {
		t.Fatal("a server without a secret answered")
	}
}

// The client names what went wrong: a node of another secret, an address
// that reaches another node, no address, a node that does not answer.
func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	other := serve(t, (&Server{Name: "n2", Secret: "another-secret-value"}).Handler())
	addNode(t, st, "n2", other)
	_, err := NewClient(st, testSecret).Ping(ctx, "n2")
	if err == nil || !contains(err, "cluster secret") {
		t.Fatalf("wrong secret: %v", err)
	}
	// An address that now reaches another node is refused there (421),
	// and looked up anew at the next call.
	liar := serve(t, (&Server{Name: "n9", Secret: testSecret}).Handler())
	addNode(t, st, "n3", liar)
	c := NewClient(st, testSecret)
	if _, err := c.Ping(ctx, "n3"); !errors.Is(err, errdefs.ErrUnavailable) || !contains(err, "this is node n9, not n3") {
		t.Fatalf("address of another node: %v", err)
	}
	addNode(t, st, "n3", serve(t, (&Server{Name: "n3", Secret: testSecret}).Handler()))
	if p, err := c.Ping(ctx, "n3"); err != nil || p.Node != "n3" {
		t.Fatalf("after the record's address changed: %+v, %v", p, err)
	}
	addNode(t, st, "n4", nil)
	if _, err := NewClient(st, testSecret).Ping(ctx, "n4"); !errors.Is(err, errdefs.ErrUnavailable) || !contains(err, "--advertise") {
		t.Fatalf("no address: %v", err)
	}
	gone := serve(t, http.NotFoundHandler())
	addNode(t, st, "n5", gone)
	gone.Close()
	if _, err := NewClient(st, testSecret).Ping(ctx, "n5"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("node not answering: %v", err)
	}
	if _, err := NewClient(st, testSecret).Ping(ctx, "n6"); !errdefs.IsNotFound(err) {
		t.Fatalf("node without a record: %v", err)
	}
}

// An error keeps its errdefs kind, and an invalid input its field, across
// the wire.
func TestErrorKindsCrossTheWire(t *testing.T) {
	st := testStore(t)
	var answer error
	srv := serve(t, guard(testSecret, testLog(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httperr.WriteErr(w, answer)
	})))
	addNode(t, st, "n1", srv)
	c := NewClient(st, testSecret)
	for _, tc := range []struct {
		err  error
		kind error
	}{
		{errors.Join(errors.New("replica r1"), errdefs.ErrNotFound), errdefs.ErrNotFound},
		{errors.Join(errors.New("busy"), errdefs.ErrConflict), errdefs.ErrConflict},
		{errors.Join(errors.New("later"), errdefs.ErrUnavailable), errdefs.ErrUnavailable},
		{errdefs.Invalid("config.port", "0 is not a port"), errdefs.ErrInvalid},
	} {
		answer = tc.err
		err := c.call(context.Background(), "n1", http.MethodPost, "x", nil, nil)
		if !errors.Is(err, tc.kind) {
			t.Errorf("%v came back as %v", tc.err, err)
		}
	}
	answer = errdefs.Invalid("config.port", "0 is not a port")
	err := c.call(context.Background(), "n1", http.MethodPost, "x", nil, nil)
	if errdefs.Field(err) != "config.port" || err.Error() != "config.port: node n1: 0 is not a port" {
		t.Fatalf("field error: %q field %q", err, errdefs.Field(err))
	}
	answer = errors.New("disk on fire")
	err = c.call(context.Background(), "n1", http.MethodPost, "x", nil, nil)
	if err == nil || errdefs.IsNotFound(err) || errdefs.IsConflict(err) || !contains(err, "disk on fire") {
		t.Fatalf("plain error: %v", err)
	}
}
