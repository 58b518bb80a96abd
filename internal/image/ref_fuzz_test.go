package image

import (
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// FuzzParseReference: a reference is refused naming the field
// "reference", or split into a name and tag that parse again to the same.
func FuzzParseReference(f *testing.F) {
	for _, s := range []string{"busybox", "busybox:1", "localhost:5000/a/b:v1.2", "reg.example.com/x", "a@sha256:00", "A:1", "a:", ":1", "a//b", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, tag, err := ParseReference(s)
		if err != nil {
			if errdefs.Field(err) != "reference" {
				t.Fatalf("%q: error %v does not name the reference", s, err)
			}
			return
		}
		if name == "" || tag == "" || strings.Contains(name, "@") {
			t.Fatalf("%q: name %q tag %q", s, name, tag)
		}
		n2, t2, err := ParseReference(name + ":" + tag)
		if err != nil || n2 != name || t2 != tag {
			t.Fatalf("%q: %s:%s parses again to %q %q %v", s, name, tag, n2, t2, err)
		}
	})
}
