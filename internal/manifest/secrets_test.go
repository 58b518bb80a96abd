package manifest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestParseSecrets(t *testing.T) {
	const base = "name = \"web\"\nimage = \"web:1\"\n"
	c, err := Parse([]byte(base), "shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Secrets != nil || !c.TokenInEnv() || c.StoredSecrets() != nil {
		t.Fatalf("defaults: secrets %v, token in env %v", c.Secrets, c.TokenInEnv())
	}
	plain := c.Hash()
	c, err = Parse([]byte(base+"[secrets]\n"), "shoal.toml")
	if err != nil || c.Hash() != plain {
		t.Fatalf("an empty [secrets]: hash %s, want %s (%v)", c.Hash(), plain, err)
	}
	c, err = Parse([]byte(base+`[secrets]
db_password = {}
API_KEY = { env = true, mode = "0440", gid = 33 }
SHOAL_TOKEN = { env = false }
[secrets."tls.key"]
uid = 33
`), "shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Hash() == plain || c.TokenInEnv() || !slices.Equal(c.StoredSecrets(), []string{"API_KEY", "db_password", "tls.key"}) {
		t.Fatalf("secrets %+v: token in env %v, stored %v", c.Secrets, c.TokenInEnv(), c.StoredSecrets())
	}
	if k := c.Secrets["API_KEY"]; !k.Env || k.FileMode() != 0o440 || k.GID != 33 || k.UID != 0 {
		t.Fatalf("API_KEY %+v mode %o", k, k.FileMode())
	}
	if d := c.Secrets["db_password"]; d.Env || d.FileMode() != 0o400 {
		t.Fatalf("db_password %+v mode %o", d, d.FileMode())
	}
	if c.Secrets["tls.key"].UID != 33 {
		t.Fatalf("tls.key %+v", c.Secrets["tls.key"])
	}
	c, err = Parse([]byte(base+"[secrets]\nSHOAL_TOKEN = { env = true }\n"), "shoal.toml")
	if err != nil || !c.TokenInEnv() || c.StoredSecrets() != nil {
		t.Fatalf("SHOAL_TOKEN with env: in env %v, stored %v, %v", c.TokenInEnv(), c.StoredSecrets(), err)
	}

	many := "[secrets]\n"
	for i := range MaxSecrets + 1 {
		many += "s" + strings.Repeat("x", i) + " = {}\n"
	}
	for _, tc := range []struct{ name, toml, field, msg string }{
		{"not a table", "secrets = [\"a\"]\n", "secrets", "must be a table"},
		{"entry not a table", "[secrets]\na = \"hunter2\"\n", "secrets.a", "line 4"},
		{"unknown key", "[secrets]\na = { value = \"hunter2\" }\n", "secrets.a.value", "unknown field"},
		{"name dot first", "[secrets]\n\".a\" = {}\n", "secrets..a", "not starting with '.'"},
		{"name slash", "[secrets]\n\"a/b\" = {}\n", "secrets.a/b", "letters, digits"},
		{"name too long", "[secrets]\n" + strings.Repeat("a", MaxSecretName+1) + " = {}\n", "secrets." + strings.Repeat("a", MaxSecretName+1), "at most 64"},
		{"name shoal's", "[secrets]\nSHOAL_APP = {}\n", "secrets.SHOAL_APP", "reserved"},
		{"env not an identifier", "[secrets]\n\"tls.key\" = { env = true }\n", "secrets.tls.key.env", "identifier"},
		{"env PORT", "[secrets]\nPORT = { env = true }\n", "secrets.PORT.env", "PORT"},
		{"env twice", "[env]\nA = \"1\"\n[secrets]\nA = { env = true }\n", "secrets.A.env", "also in [env]"},
		{"env type", "[secrets]\nA = { env = \"yes\" }\n", "secrets.A.env", "line 4"},
		{"mode not octal", "[secrets]\nA = { mode = \"0999\" }\n", "secrets.A.mode", "octal"},
		{"mode too big", "[secrets]\nA = { mode = \"04777\" }\n", "secrets.A.mode", "octal"},
		{"uid high", "[secrets]\nA = { uid = 65536 }\n", "secrets.A.uid", "0-65535"},
		{"gid negative", "[secrets]\nA = { gid = -1 }\n", "secrets.A.gid", "0-65535"},
		{"too many", many, "secrets", "at most 64"},
		{"volume under", "[volumes]\ns = \"/run/secrets/x\"\n", "volumes.s", "/run/secrets"},
		{"volume at", "[volumes]\ns = \"/run/secrets\"\n", "volumes.s", "/run/secrets"},
		{"state dir", "[volumes]\nd = \"/data\"\n[state]\ndir = \"/run/secrets\"\nmerge = \"append\"\n", "state.dir", "/run/secrets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(base+tc.toml), "shoal.toml")
			if err == nil {
				t.Fatalf("no error for\n%s", tc.toml)
			}
			if !errors.Is(err, errdefs.ErrInvalid) || errdefs.Field(err) != tc.field || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q (field %q), want field %q and %q", err, errdefs.Field(err), tc.field, tc.msg)
			}
		})
	}
}

func TestCheckSecretName(t *testing.T) {
	for _, ok := range []string{"a", "db_password", "tls.key", "A-1", "0"} {
		if err := CheckSecretName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "-a", "a/b", "a b", "SHOAL_TOKEN", strings.Repeat("a", 65)} {
		if err := CheckSecretName(bad); errdefs.Field(err) != "name" {
			t.Errorf("%q: %v, want an error naming name", bad, err)
		}
	}
}
