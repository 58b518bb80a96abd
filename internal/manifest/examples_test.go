package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exampleManifests parses the shoal.toml files glob finds (at least min)
// and checks that each names the app after its folder and the image
// prefix+NAME:1; it returns each file's text by its app's name.
func exampleManifests(t *testing.T, glob string, min int, prefix string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < min {
		t.Fatalf("found %d manifests as %s, want at least %d", len(files), glob, min)
	}
	texts := map[string]string{}
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
		if c.Name != name || c.Image != prefix+name+":1" {
			t.Errorf("%s: name %q image %q, want %q and %q", f, c.Name, c.Image, name, prefix+name+":1")
		}
		texts[name] = string(b)
	}
	return texts
}

// The example apps' manifests are what a new user deploys first: each one
// must parse and name its own app and image (hello, slowboot, cpuburn...).
func TestExampleManifests(t *testing.T) {
	exampleManifests(t, "../../examples/*/shoal.toml", 3, "")
}

// The Debian example apps (images built by scripts/debian-images.sh) are
// named by their folder, their images debian-NAME:1 as the script's
// import line says.
func TestDebianExampleManifests(t *testing.T) {
	texts := exampleManifests(t, "../../examples/debian/*/shoal.toml", 3, "debian-")
	if len(texts) != 4 {
		t.Fatalf("%d Debian example manifests parsed, want 4 (apache-php, django, nginx, python)", len(texts))
	}
	for name, text := range texts {
		if !strings.Contains(text, "scripts/debian-images.sh "+name+")\" --tag debian-"+name+":1") {
			t.Errorf("examples/debian/%s/shoal.toml does not say how its image is built and imported", name)
		}
	}
}
