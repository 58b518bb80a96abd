package image_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
)

// TestPullRefusesManyLayers: an image of more than image.MaxLayers layers
// is refused on its manifest, before any blob is fetched.
func TestPullRefusesManyLayers(t *testing.T) {
	ctx := context.Background()
	var blobs atomic.Int64
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			blobs.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")
	var layers []v1.Layer
	for range image.MaxLayers + 1 {
		l, err := random.Layer(16, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(addr+"/many:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push: %v", err)
	}
	blobs.Store(0)
	s := openStore(t)
	_, err = s.Pull(ctx, addr+"/many:1", image.PullOptions{Insecure: true})
	if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "129 layers, above the limit of 128") {
		t.Fatalf("pull of 129 layers: %v", err)
	}
	if n := blobs.Load(); n != 0 {
		t.Fatalf("%d blobs fetched before the image was refused", n)
	}
}
