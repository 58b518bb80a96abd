package manifest

import (
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// FuzzParse feeds shoal.toml files to Parse: it never panics, every error
// is an invalid input naming its key (or line) and the file, and a file it
// accepts validates again and round-trips its name.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"name = \"hello\"\nimage = \"hello:1\"\n",
		"name = \"web\"\nimage = \"web:1\"\nport = 8080\n[scale]\nmin = 1\nmax = 3\nidle_timeout = \"5s\"\n[resources]\ncpu = 0.5\nmemory = \"64Mi\"\n",
		"name = \"x\"\nimage = \"x:1\"\n[health]\ncommand = [\"sh\", \"-c\", \"true\"]\n[volumes]\ndata = \"/data\"\n[state]\ndir = \"/state\"\nmerge = \"append\"\nvolume = \"data\"\n",
		"name = \"x\"\nimage = \"x:1\"\n[scale]\nmxa = 3\n",
		"name = \"x\"\nimage = \"x:1\"\nenv = 1\n",
		"name = \"x\"\nname = \"y\"\n",
		"port = \"eighty\"\n",
		"[scale\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "app.toml")
		if err != nil {
			if !errdefs.IsInvalid(err) || errdefs.Field(err) == "" || !strings.HasPrefix(err.Error(), "app.toml: ") {
				t.Fatalf("error %q (field %q) is not an invalid input naming its key and file", err, errdefs.Field(err))
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config does not validate again: %v", err)
		}
		if !IsDNSLabel(c.Name) || c.Image == "" {
			t.Fatalf("accepted config with name %q image %q", c.Name, c.Image)
		}
	})
}
