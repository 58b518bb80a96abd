package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	ggname "github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/shoal-run/shoal/internal/image/imagetest"
)

// TestPullPrivateRegistry pulls through the CLI from a registry behind TLS
// with its own CA and htpasswd: without credentials or CA the errors say
// which is missing and how to give it; --creds, --creds-file and an
// auth.json named by REGISTRY_AUTH_FILE (read by the CLI) work, with the CA
// from --ca-file.
func TestPullPrivateRegistry(t *testing.T) {
	reg := imagetest.StartPrivateRegistry(t, imagetest.PrivateRegistryOptions{Users: map[string]string{"alice": "s3cret"}})
	d := startDaemon(t)
	d.busybox("busybox:1")

	// Push the daemon's busybox (its store is an OCI layout) as alice.
	idx, err := layout.ImageIndexFromPath(filepath.Join(d.dataDir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("store index: %+v %v", im, err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Addr + "/team/private:1"
	r, _ := ggname.ParseReference(ref)
	if err := remote.Write(r, img, remote.WithContext(context.Background()), remote.WithTransport(reg.Transport),
		remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"})); err != nil {
		t.Fatalf("push: %v", err)
	}
	d.must("image", "rm", "busybox:1")

	fails := func(what string, code int, args []string, says ...string) {
		t.Helper()
		res := d.shoal(append([]string{"image", "pull"}, args...)...)
		if res.code != code {
			t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, res.code, code, res.stdout, res.stderr)
		}
		t.Logf("%s: %q", what, strings.TrimSpace(res.stderr))
		if strings.Contains(res.stderr, "map[") || strings.Contains(res.stderr, "s3cret") {
			t.Errorf("%s: stderr shows a Go map or the password: %s", what, res.stderr)
		}
		for _, s := range says {
			if !strings.Contains(res.stderr, s) {
				t.Errorf("%s: stderr does not say %q: %s", what, s, res.stderr)
			}
		}
	}
	fails("no credentials", 2, []string{"--ca-file", reg.CAFile, ref}, "registry "+reg.Addr+" wants credentials", "--creds USER:PASSWORD")
	fails("wrong password", 2, []string{"--ca-file", reg.CAFile, "--creds", "alice:wrong", ref}, `refused the credentials given for user "alice"`)
	fails("no CA", 2, []string{"--creds", "alice:s3cret", ref}, "authority this host does not know", "--ca-file", "/etc/containers/certs.d/"+reg.Addr+"/ca.crt")
	fails("creds without password", 2, []string{"--creds", "alice", ref}, "--creds: must be USER:PASSWORD")
	fails("CA file without a certificate", 2, []string{"--ca-file", "/etc/hostname", "--creds", "alice:s3cret", ref}, "--ca-file /etc/hostname: no PEM certificate")
	if out := d.must("image", "ls"); strings.Contains(out, "team/private") {
		t.Fatalf("a failed pull left an image:\n%s", out)
	}

	d.must("image", "pull", "--creds", "alice:s3cret", "--ca-file", reg.CAFile, ref)
	d.must("image", "rm", ref)

	credsFile := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(credsFile, []byte("alice:s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.must("image", "pull", "--creds-file", credsFile, "--ca-file", reg.CAFile, ref)
	d.must("image", "rm", ref)

	// podman login's auth.json, found by the CLI through REGISTRY_AUTH_FILE.
	authJSON, _ := json.Marshal(map[string]any{"auths": map[string]any{
		reg.Addr: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))}}})
	authFile := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(authFile, authJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REGISTRY_AUTH_FILE", authFile)
	d.must("image", "pull", "--ca-file", reg.CAFile, ref)
	if out := d.must("run", "--rm", ref, "echo", "private"); out != "private\n" {
		t.Fatalf("run of the pulled image printed %q", out)
	}
}
