package manifest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestParseNetwork(t *testing.T) {
	const base = "name = \"web\"\nimage = \"web:1\"\n"
	c, err := Parse([]byte(base), "shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Network.EgressMode() != EgressPublic || c.Network.Allow != nil {
		t.Fatalf("defaults: %+v, want public egress and no allow list", c.Network)
	}
	plain := c.Hash()
	// Spelled-out defaults are no new revision.
	c, err = Parse([]byte(base+"[network]\negress = \"public\"\nallow = []\n"), "shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Hash() != plain {
		t.Errorf("[network] with the defaults: hash %s, want %s", c.Hash(), plain)
	}
	c, err = Parse([]byte(base+"[network]\negress = \"none\"\nallow = [\"db\", \"web\"]\n"), "shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Network.EgressMode() != EgressNone || !slices.Equal(c.Network.Allow, []string{"db", "web"}) || c.Hash() == plain {
		t.Fatalf("network %+v, hash %s (plain %s)", c.Network, c.Hash(), plain)
	}

	for _, tc := range []struct{ name, toml, field, msg string }{
		{"egress unknown", "[network]\negress = \"private\"\n", "network.egress", `"private" must be "public"`},
		{"egress empty", "[network]\negress = \"\"\n", "", ""},
		{"egress type", "[network]\negress = false\n", "network.egress", "line 4"},
		{"allow not an app", "[network]\nallow = [\"Db\"]\n", "network.allow[0]", "not an app name"},
		{"allow twice", "[network]\nallow = [\"db\", \"cache\", \"db\"]\n", "network.allow[2]", "listed twice"},
		{"allow a string", "[network]\nallow = \"db\"\n", "network.allow", "line 4"},
		{"allow too many", "[network]\nallow = [" + strings.Repeat("\"a\",", MaxAllow) + "\"b\"]\n", "network.allow", "at most 64"},
		{"unknown key", "[network]\ningress = \"none\"\n", "network.ingress", "unknown field"},
		{"not a table", "network = \"none\"\n", "network", "expected table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(base+tc.toml), "shoal.toml")
			if tc.field == "" {
				if err != nil {
					t.Fatalf("%q: %v", tc.toml, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error for\n%s", tc.toml)
			}
			if !errors.Is(err, errdefs.ErrInvalid) || errdefs.Field(err) != tc.field || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q (field %q), want field %q and %q", err, errdefs.Field(err), tc.field, tc.msg)
			}
		})
	}
}
