package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestParseVolumeOwners(t *testing.T) {
	const base = "name = \"web\"\nimage = \"web:1\"\n"
	plain, err := Parse([]byte(base+"[volumes]\ndata = \"/data\"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if plain.Volumes["data"] != "/data" || plain.VolumeOwners != nil || plain.Owner("data") != (VolumeOwner{-1, -1}) {
		t.Fatalf("plain volume: %+v %+v", plain.Volumes, plain.VolumeOwners)
	}
	// A table without an owner is the same volume, with the same hash.
	table, err := Parse([]byte(base+"[volumes]\ndata = { path = \"/data\" }\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if table.Hash() != plain.Hash() {
		t.Fatal("a volume as a table without uid or gid changed the hash")
	}
	for _, c := range []struct {
		toml string
		want VolumeOwner
	}{
		{"[volumes]\ndata = { path = \"/data\", uid = 33, gid = 34 }\n", VolumeOwner{33, 34}},
		{"[volumes]\ndata = { path = \"/data\", uid = 1000 }\n", VolumeOwner{1000, 1000}},
		{"[volumes]\ndata = { path = \"/data\", gid = 50 }\n", VolumeOwner{-1, 50}},
		{"[volumes.data]\npath = \"/data\"\nuid = 0\n", VolumeOwner{0, 0}},
	} {
		c2, err := Parse([]byte(base+c.toml), "")
		if err != nil {
			t.Fatalf("%s: %v", c.toml, err)
		}
		if c2.Volumes["data"] != "/data" || c2.Owner("data") != c.want {
			t.Fatalf("%s: volumes %+v, owner %+v; want %+v", c.toml, c2.Volumes, c2.Owner("data"), c.want)
		}
		if c2.Hash() == plain.Hash() {
			t.Fatalf("%s: an owner did not change the hash", c.toml)
		}
	}
}

func TestParseVolumeErrors(t *testing.T) {
	const base = "name = \"web\"\nimage = \"web:1\"\n[volumes]\n"
	for _, c := range []struct{ toml, field, msg string }{
		{"data = { uid = 33 }\n", "volumes.data.path", "is required"},
		{"data = { path = 3 }\n", "volumes.data.path", "must be a string"},
		{"data = { path = \"/data\", uid = -1 }\n", "volumes.data.uid", "0-65535"},
		{"data = { path = \"/data\", gid = 65536 }\n", "volumes.data.gid", "0-65535"},
		{"data = { path = \"/data\", uid = \"www-data\" }\n", "volumes.data.uid", "the string \"www-data\""},
		{"data = { path = \"/data\", mode = \"0777\" }\n", "volumes.data.mode", "unknown field"},
		{"data = 3\n", "volumes.data", "must be a path"},
		{"data = { path = \"data\" }\n", "volumes.data", "absolute"},
	} {
		_, err := Parse([]byte(base+c.toml), "shoal.toml")
		if err == nil {
			t.Fatalf("no error for %s", c.toml)
		}
		if !errors.Is(err, errdefs.ErrInvalid) || errdefs.Field(err) != c.field || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s: error %q (field %q); want field %q and %q", c.toml, err, errdefs.Field(err), c.field, c.msg)
		}
	}
}
