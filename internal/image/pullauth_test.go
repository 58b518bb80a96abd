package image_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/image/imagetest"
)

// pushPrivate pushes a busybox image to reg as repo:1 with user/password,
// and returns the reference and the image's digest.
func pushPrivate(t *testing.T, reg imagetest.PrivateRegistry, repo, user, password string) (string, string) {
	t.Helper()
	src := openStore(t)
	bb := imagetest.Busybox(t, src, "busybox:1")
	ref := reg.Addr + "/" + repo + ":1"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	opts := []remote.Option{remote.WithContext(context.Background()), remote.WithTransport(reg.Transport)}
	if user != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: user, Password: password}))
	}
	if err := remote.Write(r, storedImage(t, src, bb), opts...); err != nil {
		t.Fatalf("push: %v", err)
	}
	return ref, bb.Digest
}

// certsDir makes a certs.d folder with files for the registry at addr.
func certsDir(t *testing.T, addr string, files map[string][]byte) string {
	t.Helper()
	d := t.TempDir()
	for n, b := range files {
		if err := os.MkdirAll(filepath.Join(d, addr), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, addr, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func wantErr(t *testing.T, what string, err error, says ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: pulled", what)
	}
	t.Logf("%s: %v", what, err)
	if strings.Contains(err.Error(), "map[") {
		t.Errorf("%s: the error shows a Go map: %v", what, err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: error %q does not say %q", what, err, s)
		}
	}
}

// TestPullPrivateRegistry pulls from a registry behind TLS (its own CA) and
// htpasswd: credentials given, from auth files and from a credential
// helper; the CA given or in a certs.d folder; and the errors without them.
func TestPullPrivateRegistry(t *testing.T) {
	ctx := context.Background()
	reg := imagetest.StartPrivateRegistry(t, imagetest.PrivateRegistryOptions{Users: map[string]string{"alice": "s3cret"}})
	ref, dgst := pushPrivate(t, reg, "team/app", "alice", "s3cret")
	noCerts := []string{t.TempDir()}
	alice := &authn.AuthConfig{Username: "alice", Password: "s3cret"}

	dst := openStore(t)
	_, err := dst.Pull(ctx, ref, image.PullOptions{CA: reg.CA, CertsDirs: noCerts})
	wantErr(t, "no credentials", err, "registry "+reg.Addr+" wants credentials", "none were given", "--creds USER:PASSWORD", "podman login "+reg.Addr)
	if !errdefs.IsInvalid(err) {
		t.Errorf("no credentials: %v is not an invalid input", err)
	}
	_, err = dst.Pull(ctx, ref, image.PullOptions{Auth: &authn.AuthConfig{Username: "alice", Password: "wrong"}, CA: reg.CA, CertsDirs: noCerts})
	wantErr(t, "wrong password", err, "registry "+reg.Addr+` refused the credentials given for user "alice"`)
	_, err = dst.Pull(ctx, ref, image.PullOptions{Auth: alice, CertsDirs: noCerts})
	wantErr(t, "unknown CA", err, "registry "+reg.Addr, "authority this host does not know", "--ca-file", "/etc/containers/certs.d/"+reg.Addr+"/ca.crt")
	if _, err := dst.List(ctx); err != nil {
		t.Fatal(err)
	}
	if imgs, _ := dst.List(ctx); len(imgs) != 0 {
		t.Fatalf("failed pulls left %v", imgs)
	}

	got, err := dst.Pull(ctx, ref, image.PullOptions{Auth: alice, CA: reg.CA, CertsDirs: noCerts})
	if err != nil || got.Digest != dgst {
		t.Fatalf("pull with credentials and CA: %+v %v", got, err)
	}

	// The CA in a certs.d folder, the credentials in an auth.json named by
	// REGISTRY_AUTH_FILE (podman's format: base64 "user:password").
	certs := []string{certsDir(t, reg.Addr, map[string][]byte{"ca.crt": reg.CA})}
	authJSON, _ := json.Marshal(map[string]any{"auths": map[string]any{
		reg.Addr: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))}}})
	authFile := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(authFile, authJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REGISTRY_AUTH_FILE", authFile)
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	if got, err := openStore(t).Pull(ctx, ref, image.PullOptions{Keychain: image.Keychain(), CertsDirs: certs}); err != nil || got.Digest != dgst {
		t.Fatalf("pull with REGISTRY_AUTH_FILE and certs.d: %+v %v", got, err)
	}

	// Docker's config.json with a credential helper for the registry.
	bin := t.TempDir()
	helper := "#!/bin/sh\nread url\nprintf '{\"ServerURL\":\"%s\",\"Username\":\"alice\",\"Secret\":\"s3cret\"}' \"$url\"\n"
	if err := os.WriteFile(filepath.Join(bin, "docker-credential-shoaltest"), []byte(helper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	dockerDir := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{"credHelpers": map[string]string{reg.Addr: "shoaltest"}})
	if err := os.WriteFile(filepath.Join(dockerDir, "config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("DOCKER_CONFIG", dockerDir)
	if got, err := openStore(t).Pull(ctx, ref, image.PullOptions{Keychain: image.Keychain(), CertsDirs: certs}); err != nil || got.Digest != dgst {
		t.Fatalf("pull with a credential helper: %+v %v", got, err)
	}
}

// TestPullClientCertificate pulls from a registry that wants a client
// certificate: found in the registry's certs.d folder (client.cert,
// client.key), and the error when it is not there.
func TestPullClientCertificate(t *testing.T) {
	ctx := context.Background()
	reg := imagetest.StartPrivateRegistry(t, imagetest.PrivateRegistryOptions{ClientCert: true})
	ref, dgst := pushPrivate(t, reg, "certs/app", "", "")

	onlyCA := []string{certsDir(t, reg.Addr, map[string][]byte{"ca.crt": reg.CA})}
	_, err := openStore(t).Pull(ctx, ref, image.PullOptions{CertsDirs: onlyCA})
	wantErr(t, "no client certificate", err, "registry "+reg.Addr+" wants a client certificate", "client.cert")

	// Docker's folder second, the client pair only there.
	both := append(onlyCA, certsDir(t, reg.Addr, map[string][]byte{"client.cert": reg.ClientCert, "client.key": reg.ClientKey}))
	if got, err := openStore(t).Pull(ctx, ref, image.PullOptions{CertsDirs: both}); err != nil || got.Digest != dgst {
		t.Fatalf("pull with a client certificate: %+v %v", got, err)
	}
}
