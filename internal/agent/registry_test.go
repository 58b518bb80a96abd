package agent

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/image/imagetest"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
)

func openImages(t *testing.T) *image.Store {
	t.Helper()
	s, err := image.Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A node without an image fetches it by digest from the node's registry
// the spec names, over real HTTP with the cluster secret, and has the same
// image after (manifest, config and layers, verified by digest).
func TestFetchImageFromNode(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	have, lack := openImages(t), openImages(t)
	img := imagetest.Busybox(t, have, "busybox:1")
	srv := serve(t, (&Server{Name: "n1", Secret: testSecret, Blobs: have, Log: testLog(t)}).Registry())
	addNode(t, st, "n1", srv)
	f := &Fetcher{Images: lack, Client: NewClient(st, testSecret), Self: "n2", Log: testLog(t)}
	if err := f.Ensure(ctx, img.Digest, "n1"); err != nil {
		t.Fatalf("fetch from n1: %v", err)
	}
	got, err := lack.Get(ctx, img.Digest)
	if err != nil {
		t.Fatalf("after the fetch: %v", err)
	}
	if got.Digest != img.Digest || got.ID != img.ID || len(got.Layers) != len(img.Layers) || got.Size != img.Size {
		t.Fatalf("fetched %+v; want %+v", got, img)
	}
	// Had, it is not fetched again: with the registry gone, Ensure holds.
	srv.Close()
	if err := f.Ensure(ctx, img.Digest, "n1"); err != nil {
		t.Fatalf("second ensure: %v", err)
	}
}

// Without the node named, any live node that has the image serves it; a
// digest no node has is not found; a node of another secret is refused.
func TestFetchImageSources(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	have := openImages(t)
	img := imagetest.Busybox(t, have, "busybox:1")
	empty := serve(t, (&Server{Name: "n1", Secret: testSecret, Blobs: openImages(t)}).Registry())
	addNode(t, st, "n1", empty)
	full := serve(t, (&Server{Name: "n3", Secret: testSecret, Blobs: have}).Registry())
	addNode(t, st, "n3", full)
	other := serve(t, (&Server{Name: "n4", Secret: "another-secret-value", Blobs: have}).Registry())
	addNode(t, st, "n4", other)

	lack := openImages(t)
	f := &Fetcher{Images: lack, Client: NewClient(st, testSecret), Self: "n2",
		Nodes: func(context.Context) ([]string, error) { return []string{"n2", "n1", "n3"}, nil }}
	if err := f.Ensure(ctx, img.Digest, "n1"); err != nil {
		t.Fatalf("n1 lacks it, n3 has it: %v", err)
	}
	missing := "sha256:" + strings.Repeat("ab", 32)
	if err := f.Ensure(ctx, missing, ""); !errdefs.IsNotFound(err) {
		t.Fatalf("a digest no node has: %v; want not found", err)
	}
	alone := &Fetcher{Images: openImages(t), Client: NewClient(st, testSecret), Self: "n2"}
	if err := alone.Ensure(ctx, img.Digest, ""); !errdefs.IsNotFound(err) {
		t.Fatalf("no node to ask: %v; want not found", err)
	}
	if err := alone.Ensure(ctx, img.Digest, "n4"); err == nil {
		t.Fatal("a registry of another secret served the image")
	}
}

// corrupt serves the images of a store with every layer's bytes changed.
type corrupt struct{ *image.Store }

func (c corrupt) OpenBlob(dgst string) (*os.File, error) {
	f, err := c.Store.OpenBlob(dgst)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	if len(b) > 1000 { // a layer, not the config
		b[len(b)/2] ^= 0xff
	}
	tmp, err := os.CreateTemp("", "corrupt-blob")
	if err != nil {
		return nil, err
	}
	os.Remove(tmp.Name())
	tmp.Write(b)
	tmp.Seek(0, 0)
	return tmp, nil
}

// A layer whose bytes do not match its digest is refused, and the image
// is not stored.
func TestFetchImageVerified(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	have := openImages(t)
	img := imagetest.Busybox(t, have, "busybox:1")
	srv := serve(t, (&Server{Name: "n1", Secret: testSecret, Blobs: corrupt{have}}).Registry())
	addNode(t, st, "n1", srv)
	lack := openImages(t)
	f := &Fetcher{Images: lack, Client: NewClient(st, testSecret), Self: "n2"}
	if err := f.Ensure(ctx, img.Digest, "n1"); err == nil {
		t.Fatal("a corrupted layer was taken")
	}
	if _, err := lack.Get(ctx, img.Digest); !errdefs.IsNotFound(err) {
		t.Fatalf("image after a refused fetch: %v; want not found", err)
	}
}

// The registry is read only, behind the cluster secret, by digest only,
// and serves no blob that is not part of an image.
func TestRegistryRefuses(t *testing.T) {
	have := openImages(t)
	img := imagetest.Busybox(t, have, "busybox:1")
	srv := serve(t, (&Server{Name: "n1", Secret: testSecret, Blobs: have}).Registry())
	for _, c := range []struct {
		method, path, tok string
		code              int
	}{
		{"GET", "/v2/", "", http.StatusUnauthorized},
		{"GET", "/v2/shoal/manifests/" + img.Digest, "", http.StatusUnauthorized},
		{"GET", "/v2/shoal/manifests/" + img.Digest, userTok, http.StatusUnauthorized},
		{"GET", "/v2/", testSecret, http.StatusOK},
		{"GET", "/v2/shoal/manifests/" + img.Digest, testSecret, http.StatusOK},
		{"HEAD", "/v2/shoal/manifests/" + img.Digest, testSecret, http.StatusOK},
		{"GET", "/v2/shoal/manifests/busybox", testSecret, http.StatusNotFound},
		{"GET", "/v2/shoal/blobs/sha256:" + strings.Repeat("0", 64), testSecret, http.StatusNotFound},
		{"GET", "/v2/shoal/blobs/../../etc/passwd", testSecret, http.StatusBadRequest},
		{"GET", "/v2/shoal/blobs/sha256:..%2F..%2Findex.json", testSecret, http.StatusBadRequest},
		{"PUT", "/v2/shoal/manifests/" + img.Digest, testSecret, http.StatusMethodNotAllowed},
		{"DELETE", "/v2/shoal/blobs/" + img.Digest, testSecret, http.StatusMethodNotAllowed},
	} {
		code, body := send(t, srv.URL, c.method, c.path, c.tok, "")
		if code != c.code {
			t.Errorf("%s %s with %q: %d %s; want %d", c.method, c.path, c.tok, code, body, c.code)
		}
	}
	code, body := send(t, srv.URL, "GET", "/v2/shoal/manifests/"+img.Digest, testSecret, "")
	if code != http.StatusOK || !strings.Contains(body, "layers") {
		t.Fatalf("manifest: %d %s", code, body)
	}
}

// Start on a node that lacks the spec's image fetches it from the node
// ImageFrom names before the replica starts; an image no node has is not
// found, and nothing is started.
func TestStartFetchesImage(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	have := openImages(t)
	img := imagetest.Busybox(t, have, "busybox:1")
	n1 := serve(t, (&Server{Name: "n1", Secret: testSecret, Blobs: have}).Registry())
	addNode(t, st, "n1", n1)
	c := NewClient(st, testSecret)
	lack := openImages(t)
	fake := newFakeNode()
	n2 := serve(t, (&Server{Name: "n2", Secret: testSecret, Node: fake,
		Fetch: &Fetcher{Images: lack, Client: c, Self: "n2"}}).Handler())
	addNode(t, st, "n2", n2)
	r := c.Remote("n2")
	missing := "sha256:" + strings.Repeat("cd", 32)
	_, err := r.Start(ctx, node.ReplicaSpec{ID: "web-0", App: "web", Digest: missing, ImageFrom: "n1", Config: manifest.Config{Port: 8080}})
	if !errdefs.IsNotFound(err) || len(fake.log()) != 0 {
		t.Fatalf("start with an image no node has: %v, calls %q", err, fake.log())
	}
	if _, err := r.Start(ctx, node.ReplicaSpec{ID: "web-1", App: "web", Digest: img.Digest, ImageFrom: "n1", Config: manifest.Config{Port: 8080}}); err != nil {
		t.Fatalf("start: %v", err)
	}
	if _, err := lack.Get(ctx, img.Digest); err != nil {
		t.Fatalf("image on n2 after the start: %v", err)
	}
	if got := fake.log(); len(got) != 1 || !strings.HasPrefix(got[0], "start web-1") {
		t.Fatalf("calls on n2: %q", got)
	}
}
