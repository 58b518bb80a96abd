package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The example apps' manifests are what a new user deploys first: each one
// must parse and name its own app and image.
func TestExampleManifests(t *testing.T) {
	files, err := filepath.Glob("../../examples/*/shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d example manifests, want one per example app (hello, slowboot, cpuburn)", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(b, f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		name := filepath.Base(filepath.Dir(f))
		if c.Name != name || c.Image != name+":1" {
			t.Errorf("%s: name %q image %q, want %q and %q", f, c.Name, c.Image, name, name+":1")
		}
	}
}

// The Debian example apps (images built by scripts/debian-images.sh) are
// named by their folder, their images debian-NAME:1 as the script's
// import line says.
func TestDebianExampleManifests(t *testing.T) {
	files, err := filepath.Glob("../../examples/debian/*/shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("found %d Debian example manifests, want 3 (apache-php, nginx, python)", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(b, f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		name := filepath.Base(filepath.Dir(f))
		if c.Name != name || c.Image != "debian-"+name+":1" {
			t.Errorf("%s: name %q image %q, want %q and %q", f, c.Name, c.Image, name, "debian-"+name+":1")
		}
		if !strings.Contains(string(b), "scripts/debian-images.sh "+name+")\" --tag debian-"+name+":1") {
			t.Errorf("%s does not say how its image is built and imported", f)
		}
	}
}
